"""bounds: the lemmas of the bound chain, their symbolic derivation, witnesses and statistics."""
