"""Every matmul of a JAX function, one call at a time: ``walk(fn, on_dot, *args)``.

``walk`` traces ``fn`` to a jaxpr and evaluates it eagerly, equation by equation, as
:func:`kernels.diagnose.transform.on_kernel` does, except that every floating-point ``dot_general``
(a *matmul site*) is handed to ``on_dot(site, lhs, rhs, dims, dtype)``, whose return value
becomes the dot's output. Loops are unrolled in Python so that each execution of a dot is its
own site: a ``scan`` over a model's stacked layers gives one site per layer and matmul.

* ``Site.index``: the order of execution, from 0. ``Site.layer``: the iteration of every
  enclosing ``scan`` / ``while`` loop, outermost first (``()`` outside loops).
* ``Site.label``: where the dot's weight came from: the path, in ``fn``'s arguments, of the
  array its right operand (else its left one) was read from, followed through reshapes,
  transposes, casts, slices and the stacking of per-layer parameters (``blocks/0/wqkv`` ...
  stacked and scanned gives ``blocks/2/wqkv`` in iteration 2). ``"dot"`` when neither operand
  comes from an argument.
* Softmax attention (recognised as in ``on_kernel``) is computed in float32 at
  ``Precision.HIGHEST`` and is not a site, with ``attention="float32"`` (default);
  ``attention="matmul"`` makes its two products sites too.
* ``jit`` / ``closed_call`` / custom-derivative calls and ``checkpoint`` are inlined; ``cond``
  takes its branch from the concrete index. Any other primitive that holds a dot raises
  ``NotImplementedError``. ``fn`` runs eagerly (no ``jit`` around ``walk``): sites are Python
  calls, so ``on_dot`` may record anything it likes.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any, Literal, NamedTuple

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore

from kernel_contracts.kernels.diagnose.transform import (
    CALL_BODIES,
    CALLS,
    REMATS,
    attention_dots,
    dot_dims,
    has_dot,
    is_float_dot,
)

__all__ = ["Site", "as_batched", "walk"]

# primitives whose output is (a view of) their first operand: the label follows it
_STRUCTURAL = frozenset(
    {
        "reshape", "transpose", "convert_element_type", "squeeze", "expand_dims",
        "broadcast_in_dim", "slice", "dynamic_slice", "copy", "copy_p", "rev",
        "reduce_precision",
    }
)  # fmt: skip
_STACKING = frozenset({"stack", "concatenate"})


class Site(NamedTuple):
    """One execution of one matmul: where it ran and what it multiplied."""

    index: int  # order of execution among the sites of one walk
    layer: tuple[int, ...]  # iteration of each enclosing loop, outermost first
    label: str  # the argument its weight operand came from, or "dot"
    m: int  # output rows (batch dimensions and the left operand's free dimensions)
    k: int  # reduction length
    n: int  # output columns (the right operand's free dimensions)


DotFn = Callable[[Site, Any, Any, tuple, Any], Any]


def as_batched(lhs, rhs, dims: tuple) -> tuple[Any, Any, Callable]:
    """``lhs``/``rhs`` of a ``dot_general`` as (B, M, K) and (B, K, N) arrays, and the function
    that puts a (B, M, N) result back into the ``dot_general`` output layout."""
    (lc, rc), (lb, rb) = dims
    ls, rs = jnp.shape(lhs), jnp.shape(rhs)
    lfree = [d for d in range(len(ls)) if d not in lc and d not in lb]
    rfree = [d for d in range(len(rs)) if d not in rc and d not in rb]
    k = int(np.prod([ls[d] for d in lc], dtype=np.int64))
    bshape = [ls[d] for d in lb]
    mshape, nshape = [ls[d] for d in lfree], [rs[d] for d in rfree]
    b, m, n = (int(np.prod(s, dtype=np.int64)) for s in (bshape, mshape, nshape))
    x = jnp.transpose(jnp.asarray(lhs), (*lb, *lfree, *lc)).reshape(b, m, k)
    w = jnp.transpose(jnp.asarray(rhs), (*rb, *rc, *rfree)).reshape(b, k, n)
    return x, w, lambda y: jnp.reshape(y, (*bshape, *mshape, *nshape))


def walk(
    fn: Callable,
    on_dot: DotFn,
    *args,
    attention: Literal["float32", "matmul"] = "float32",
    **kwargs,
):
    """``fn(*args, **kwargs)`` with every matmul site computed by ``on_dot`` (module docstring).

    Array leaves of the arguments are ``fn``'s inputs (their tree paths label the sites); every
    other leaf is held fixed while tracing.
    """
    if attention not in ("float32", "matmul"):
        raise ValueError(f"attention must be 'float32' or 'matmul', got {attention!r}")
    leaves, _ = jax.tree_util.tree_flatten_with_path((args, kwargs))
    where = [i for i, (_, leaf) in enumerate(leaves) if _is_array(leaf)]
    values = [leaf for _, leaf in leaves]

    def flat_fn(*arrays):
        full = list(values)
        for i, a in zip(where, arrays, strict=True):
            full[i] = a
        a, kw = jax.tree.unflatten(jax.tree.structure((args, kwargs)), full)
        return fn(*a, **kw)

    arrays = [values[i] for i in where]
    closed, shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*arrays)
    labels = [_path_label(leaves[i][0]) for i in where]
    walker = _Walker(on_dot, attention)
    outs, _ = walker.run(closed.jaxpr, closed.consts, arrays, labels, ())
    return jax.tree.unflatten(jax.tree.structure(shapes), outs)


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


def _path_label(path) -> str:
    parts = []
    for key in path[2:]:  # skip (args | kwargs, position)
        for attr in ("key", "name", "idx"):
            if hasattr(key, attr):
                parts.append(str(getattr(key, attr)))
                break
    if parts and parts[-1] == "value":  # a Flax NNX variable's payload
        parts.pop()
    if not parts:
        parts = [str(getattr(path[1], "idx", getattr(path[1], "key", "arg")))]
    return "/".join(parts)


def _merge(labels: list) -> str | None:
    """The label of a stack of labelled arrays: equal labels, or labels that differ in one
    numeric path part only (``blocks/0/w``, ``blocks/1/w`` give ``blocks/*/w``)."""
    if not labels or any(lab is None for lab in labels):
        return None
    if len(set(labels)) == 1:
        return labels[0]
    split = [lab.split("/") for lab in labels]
    if len({len(s) for s in split}) != 1:
        return None
    differ = [i for i in range(len(split[0])) if len({s[i] for s in split}) > 1]
    if len(differ) != 1 or not all(s[differ[0]].isdigit() for s in split):
        return None
    out = split[0][:]
    out[differ[0]] = "*"
    return "/".join(out)


def _at(label: str | None, i: int) -> str | None:
    """The label of iteration ``i`` of a scanned array."""
    if label is None:
        return None
    return label.replace("*", str(i), 1) if "*" in label else f"{label}[{i}]"


class _Walker:
    def __init__(self, on_dot: DotFn, attention: str):
        self.on_dot = on_dot
        self.attention = attention
        self.count = 0

    def run(self, jaxpr, consts, args, labels, layer) -> tuple[list, list]:
        """Outputs of ``jaxpr`` and their labels."""
        if isinstance(jaxpr, jcore.ClosedJaxpr):
            consts, jaxpr = jaxpr.consts, jaxpr.jaxpr
        env: dict = {}
        lab: dict = {}

        def read(v):
            return v.val if isinstance(v, jcore.Literal) else env[v]

        def label(v):
            return None if isinstance(v, jcore.Literal) else lab.get(v)

        for v, x in zip(jaxpr.constvars, consts, strict=True):
            env[v] = x
        for v, x, name in zip(jaxpr.invars, args, labels, strict=True):
            env[v], lab[v] = x, name
        attention = attention_dots(jaxpr) if self.attention == "float32" else frozenset()
        for i, eqn in enumerate(jaxpr.eqns):
            invals = [read(v) for v in eqn.invars]
            inlabels = [label(v) for v in eqn.invars]
            if eqn.primitive.name == "dot_general" and is_float_dot(eqn) and i not in attention:
                # outside the equation's context: on_dot's own jitted calls then share their
                # compiled programs with calls made anywhere else
                dims = dot_dims(eqn.params["dimension_numbers"])
                dtype = eqn.outvars[0].aval.dtype
                outs = [self._site(invals, inlabels, dims, dtype, layer)]
                outlabels = [None]
            else:
                with eqn.ctx.manager:
                    outs, outlabels = self._eqn(eqn, invals, inlabels, layer)
            for v, x, name in zip(eqn.outvars, outs, outlabels, strict=True):
                if not isinstance(v, jcore.DropVar):
                    env[v], lab[v] = x, name
        return [read(v) for v in jaxpr.outvars], [label(v) for v in jaxpr.outvars]

    def _eqn(self, eqn, invals, inlabels, layer):
        name = eqn.primitive.name
        nout = len(eqn.outvars)
        if name == "dot_general" and is_float_dot(eqn):  # recognised attention (sites: in run)
            dims = dot_dims(eqn.params["dimension_numbers"])
            lhs, rhs = (jnp.asarray(x, jnp.float32) for x in invals)
            out = lax.dot_general(
                lhs, rhs, dims, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32
            )
            return [out.astype(eqn.outvars[0].aval.dtype)], [None]
        if not has_dot(eqn):
            out = eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
            outs = out if eqn.primitive.multiple_results else [out]
            if name in _STRUCTURAL:
                return outs, [inlabels[0]] * nout
            if name in _STACKING:
                return outs, [_merge(inlabels)] * nout
            return outs, [None] * nout
        return self._higher_order(eqn, name, invals, inlabels, layer)

    def _site(self, invals, inlabels, dims, dtype, layer):
        lhs, rhs = invals
        (lc, rc), (_, rb) = dims
        ls, rs = jnp.shape(lhs), jnp.shape(rhs)
        k = int(np.prod([ls[d] for d in lc], dtype=np.int64))
        m = int(np.prod([s for d, s in enumerate(ls) if d not in lc], dtype=np.int64))
        n = int(
            np.prod([s for d, s in enumerate(rs) if d not in rc and d not in rb], dtype=np.int64)
        )
        label = inlabels[1] or inlabels[0] or "dot"
        site = Site(self.count, tuple(layer), label, m, k, n)
        self.count += 1
        return jnp.asarray(self.on_dot(site, lhs, rhs, dims, dtype)).astype(dtype)

    def _higher_order(self, eqn, name, invals, inlabels, layer):
        p = eqn.params
        if name in CALLS:
            body = next(p[key] for key in CALL_BODIES if key in p)
            return self.run(body, (), invals, inlabels, layer)
        if name in REMATS:
            return self.run(p["jaxpr"], (), invals, inlabels, layer)
        if name == "cond":
            index = int(np.asarray(invals[0]))
            branch = p["branches"][min(max(index, 0), len(p["branches"]) - 1)]
            return self.run(branch, (), invals[1:], inlabels[1:], layer)
        if name == "scan":
            return self._scan(p, invals, inlabels, layer)
        if name == "while":
            cn, bn = p["cond_nconsts"], p["body_nconsts"]
            cconsts, bconsts, carry = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
            clabels, blabels = inlabels[:cn], inlabels[cn : cn + bn]
            carry_labels = [None] * len(carry)
            step = 0
            while bool(np.asarray(self.run(p["cond_jaxpr"], (), [*cconsts, *carry],
                                           [*clabels, *carry_labels], layer)[0][0])):  # fmt: skip
                carry, carry_labels = self.run(
                    p["body_jaxpr"], (), [*bconsts, *carry], [*blabels, *carry_labels],
                    (*layer, step),
                )  # fmt: skip
                step += 1
            return carry, [None] * len(carry)
        raise NotImplementedError(
            f"sites: a {name!r} equation holds a dot_general; walking into {name!r} is not "
            "supported"
        )

    def _scan(self, p, invals, inlabels, layer):
        nc, ncarry, length = p["num_consts"], p["num_carry"], p["length"]
        consts, carry, xs = invals[:nc], invals[nc : nc + ncarry], invals[nc + ncarry :]
        clabels, xlabels = inlabels[:nc], inlabels[nc + ncarry :]
        carry_labels = list(inlabels[nc : nc + ncarry])
        ys = []
        order = range(length - 1, -1, -1) if p["reverse"] else range(length)
        for i in order:
            x_i = [x[i] for x in xs]
            out, out_labels = self.run(
                p["jaxpr"], (), [*consts, *carry, *x_i],
                [*clabels, *carry_labels, *(_at(lab, i) for lab in xlabels)], (*layer, i),
            )  # fmt: skip
            carry, carry_labels = out[:ncarry], out_labels[:ncarry]
            ys.append(out[ncarry:])
        if p["reverse"]:
            ys.reverse()
        avals = p["jaxpr"].out_avals[ncarry:]
        stacked = [
            jnp.stack([y[j] for y in ys]) if ys else jnp.zeros((0, *a.shape), a.dtype)
            for j, a in enumerate(avals)
        ]
        return [*carry, *stacked], [*carry_labels, *([None] * len(avals))]
