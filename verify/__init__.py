"""verify: z3 obligations, proof-carrying reports, the re-checker and the command line."""
