"""Any JAX function on an emulated inference kernel: ``on_kernel(fn, spec)``.

``on_kernel(fn, spec)`` returns a function that computes ``fn`` with every floating-point
``lax.dot_general`` (so ``jnp.dot``, ``@``, ``jnp.matmul``, ``jnp.einsum``, Flax and Equinox
linear layers) replaced by :func:`kernels._matmul.emulated_dot_general` under the spec's matmul
arithmetic. Everything else (norms, activations, softmax, adds) runs as written. It works on
functions written with no knowledge of this package: ``fn`` is traced to a jaxpr and the jaxpr
is evaluated again, equation by equation, with the dots swapped.

* **Sub-jaxprs.** Equations that hold a jaxpr with a dot inside are evaluated recursively:
  ``jit`` / ``closed_call`` bodies and the primal function of ``custom_jvp`` / ``custom_vjp``
  calls are inlined; ``scan``, ``while``, ``cond`` and ``checkpoint`` (remat) are rebuilt with
  ``lax.scan``, ``lax.while_loop``, ``lax.switch`` and ``jax.checkpoint`` around the
  transformed bodies. Equations without a dot inside are bound unchanged (so their custom
  derivative rules stay). Any other primitive with a dot inside raises ``NotImplementedError``
  rather than leaving the dot unemulated.
* **Reduction splits.** Each dot reduces over K (the product of its contracting dimensions) in
  ``reduction_splits(batch_size, K, batching)`` parts, as ``kernels.ops.EmulatedMatmul`` does,
  so ``on_kernel(f, spec, batch_size=b)`` uses the matmuls of ``inference_ops(spec, b)``.
* **Attention.** With ``attention="float32"`` a recognised softmax attention keeps its two
  products in float32 at ``Precision.HIGHEST``, as the spec's whole-sequence attention does
  (``inference_ops(...).attention``). Recognised: a dot whose operand was computed from another
  dot's output through ``exp`` and ``reduce_sum`` (a softmax, possibly masked and scaled,
  possibly inside a ``jit`` or custom-derivative call), within one jaxpr; both dots count as
  attention. This covers ``jax.nn.dot_product_attention`` (its XLA path), Flax and Equinox
  attention. It also matches a softmax-gated mixture; the KV-cache format is not applied (a
  function without a cache has none). ``attention="matmul"`` (default) emulates every dot.
* **Gradients.** An emulated dot's derivative is that of the exact float32 dot (a
  straight-through estimator, as quantised-training libraries do): reverse-mode ``jax.grad``
  works, forward-mode ``jax.jvp`` does not (``custom_vjp``). A ``custom_jvp`` / ``custom_vjp``
  function with a dot inside is inlined, so its own derivative rule is replaced by the
  derivative of its body.
* **Dtypes.** Dots of integer or complex operands are bound unchanged. An emulated dot's value
  is representable in ``spec.matmul.output`` and is returned in the dtype the original dot had.

The transformed function takes and returns the same pytrees as ``fn``. Array leaves (JAX or
NumPy arrays, tracers) are its inputs; every other leaf (Python numbers, strings, static
fields) is held fixed while tracing, as ``jax.jit`` does with static arguments; Flax NNX and
Equinox modules are pytrees, so they can be passed in (or closed over). ``fn`` is run as a pure
function: state it writes (NNX variables it updates, Python side effects) is not carried out.
The result can be jitted, differentiated (reverse mode) and vmapped; each call outside ``jit``
traces ``fn`` again, so wrap it in ``jax.jit`` in loops.

The name: ``on_kernel(fn, spec)`` reads as "``fn`` on kernel ``spec``", and does not clash with
any submodule of ``kernels`` (``kernels._matmul``, ``kernels.emulation`` must stay modules).

References:
    JAX documentation, "Writing custom Jaxpr interpreters in JAX" (evaluating a jaxpr
    equation by equation). Prior art for Flax: AQT passes its own ``dot_general`` to layers
    that accept one (``nn.Dense(dot_general=...)``); Qwix patches the Python functions
    (``jax.lax.dot_general``, ``jnp.einsum``) while the model runs, thread-locally, turning
    ``jit`` off for jitted ones. Both reach only the calls they know of; the jaxpr sees every
    dot, whatever library or alias produced it, and keeps ``jit``.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any, Literal

import jax
import jax.numpy as jnp
import numpy as np
from jax import lax
from jax.extend import core as jcore

from kernel_contracts.contracts.model import KernelSpec, MatmulSpec
from kernel_contracts.contracts.presets import PRESETS

__all__ = [
    "CALLS",
    "CALL_BODIES",
    "REMATS",
    "DotRule",
    "attention_dots",
    "dot_dims",
    "evaluate",
    "has_dot",
    "is_float_dot",
    "on_kernel",
    "resolve_spec",
]

Attention = Literal["matmul", "float32"]

# primitives that call a jaxpr, where a call keeps its body, and the checkpoint (remat) ones
CALLS = ("jit", "pjit", "closed_call", "core_call", "custom_jvp_call", "custom_vjp_call")
CALL_BODIES = ("jaxpr", "call_jaxpr", "fun_jaxpr")
REMATS = ("remat", "remat2", "checkpoint")
_SOFTMAX = frozenset({"exp", "reduce_sum"})


@dataclass(frozen=True)
class DotRule:
    """How the transform computes each dot (hashable: a static argument under ``jit``)."""

    matmul: MatmulSpec
    batch_size: int = 1
    batching: Literal["dynamic", "fixed"] = "fixed"
    impl: Literal["jax", "pallas"] = "jax"
    attention: Attention = "matmul"

    def splits(self, k: int) -> int:
        from kernel_contracts.kernels.batching import reduction_splits

        return reduction_splits(self.batch_size, k, self.batching) if k >= 1 else 1


def resolve_spec(spec: KernelSpec | str) -> KernelSpec:
    """``spec`` itself, or the preset it names (``ValueError`` for an unknown name)."""
    if isinstance(spec, KernelSpec):
        return spec
    if isinstance(spec, str):
        if spec not in PRESETS:
            raise ValueError(f"unknown preset {spec!r}; expected one of {', '.join(PRESETS)}")
        return PRESETS[spec]
    raise TypeError(f"spec must be a KernelSpec or a preset name, got {type(spec).__name__}")


def on_kernel(
    fn: Callable,
    spec: KernelSpec | str,
    *,
    batch_size: int = 1,
    batching: Literal["dynamic", "fixed"] | None = None,
    impl: Literal["jax", "pallas"] = "jax",
    attention: Attention = "matmul",
) -> Callable:
    """``fn`` with every floating-point dot computed by the emulated matmul of ``spec``.

    Args:
      fn: any function of pytrees of arrays (module docstring).
      spec: a ``KernelSpec`` (e.g. ``contract.kernels.inference``) or a preset name.
      batch_size: the serving batch the kernel sees; with dynamic batching it sets the number
        of reduction splits of each dot (``kernels.batching.reduction_splits``).
      batching: ``"dynamic"`` or ``"fixed"``; ``None`` takes ``spec.batching``.
      impl: the emulated matmul's implementation, ``"jax"`` or ``"pallas"``.
      attention: ``"matmul"`` emulates every dot; ``"float32"`` keeps recognised softmax
        attention in float32 (module docstring).

    Returns:
      A function with ``fn``'s signature, input and output pytrees.
    """
    kernel = resolve_spec(spec)
    if attention not in ("matmul", "float32"):
        raise ValueError(f"attention must be 'matmul' or 'float32', got {attention!r}")
    if impl not in ("jax", "pallas"):
        raise ValueError(f"impl must be 'jax' or 'pallas', got {impl!r}")
    if isinstance(batch_size, bool) or not isinstance(batch_size, int) or batch_size < 1:
        raise ValueError(f"batch_size must be a positive integer, got {batch_size!r}")
    batching = kernel.batching if batching is None else batching
    if batching not in ("dynamic", "fixed"):
        raise ValueError(f"batching must be 'dynamic' or 'fixed', got {batching!r}")
    _check_runnable(kernel.matmul, impl)  # a spec the emulated matmul cannot run fails here
    rule = DotRule(kernel.matmul, batch_size, batching, impl, attention)

    @functools.wraps(fn)
    def wrapped(*args, **kwargs):
        leaves, tree = jax.tree.flatten((args, kwargs))
        where = [i for i, leaf in enumerate(leaves) if _is_array(leaf)]

        def flat_fn(*arrays):
            full = list(leaves)
            for i, a in zip(where, arrays, strict=True):
                full[i] = a
            a, kw = jax.tree.unflatten(tree, full)
            return fn(*a, **kw)

        arrays = [leaves[i] for i in where]
        closed, shapes = jax.make_jaxpr(flat_fn, return_shape=True)(*arrays)
        outs = evaluate(closed.jaxpr, closed.consts, rule, *arrays)
        return jax.tree.unflatten(jax.tree.structure(shapes), outs)

    return wrapped


def _check_runnable(matmul: MatmulSpec, impl: str) -> None:
    """Raise ``ValueError`` for a matmul spec the emulation cannot run. An int8 spec has no
    chunk layout (its accumulation is exact, so reduction splits change nothing) and no Pallas
    kernel; a dot whose K could wrap its int32 accumulator is refused when it is reached."""
    from kernel_contracts.kernels._matmul import make_plan
    from kernel_contracts.kernels._matmul.int8 import check_int8_spec

    if not matmul.is_int8:
        make_plan(matmul, 1)
        return
    if impl == "pallas":
        raise ValueError("int8 inputs have no Pallas kernel: use impl='jax'")
    check_int8_spec(matmul, 1)


def _is_array(leaf: Any) -> bool:
    return isinstance(leaf, jax.Array | np.ndarray | np.generic)


# ---------------------------------------------------------------------- the interpreter


def evaluate(jaxpr: jcore.Jaxpr, consts, rule: DotRule, *args) -> list:
    """The outputs of ``jaxpr`` on ``args`` with every float dot emulated under ``rule``."""
    env: dict = {}

    def read(v):
        return v.val if isinstance(v, jcore.Literal) else env[v]

    for v, x in zip(jaxpr.constvars, consts, strict=True):
        env[v] = x
    for v, x in zip(jaxpr.invars, args, strict=True):
        env[v] = x
    attention = attention_dots(jaxpr) if rule.attention == "float32" else frozenset()
    for i, eqn in enumerate(jaxpr.eqns):
        invals = [read(v) for v in eqn.invars]
        with eqn.ctx.manager:
            outs = _apply(eqn, invals, rule, i in attention)
        if not eqn.primitive.multiple_results:
            outs = [outs]
        for v, x in zip(eqn.outvars, outs, strict=True):
            if not isinstance(v, jcore.DropVar):
                env[v] = x
    return [read(v) for v in jaxpr.outvars]


def _apply(eqn, invals: list, rule: DotRule, attention: bool):
    name = eqn.primitive.name
    if name == "dot_general" and is_float_dot(eqn):
        out_dtype = eqn.outvars[0].aval.dtype
        dims = dot_dims(eqn.params["dimension_numbers"])
        if attention:
            lhs, rhs = (jnp.asarray(x, jnp.float32) for x in invals)
            out = lax.dot_general(
                lhs, rhs, dims, precision=lax.Precision.HIGHEST, preferred_element_type=jnp.float32
            )
            return out.astype(out_dtype)
        return _emulated_dot(*invals, dims, rule, out_dtype)
    if not has_dot(eqn):
        return eqn.primitive.bind(*invals, **eqn.primitive.get_bind_params(eqn.params))
    return _higher_order(eqn, name, invals, rule)


def _higher_order(eqn, name: str, invals: list, rule: DotRule) -> list:
    p = eqn.params
    if name in CALLS:
        body = next(p[key] for key in CALL_BODIES if key in p)
        return _run(body, rule, *invals)
    if name == "scan":
        nc, ncarry = p["num_consts"], p["num_carry"]
        consts, init, xs = invals[:nc], invals[nc : nc + ncarry], invals[nc + ncarry :]

        def step(carry, x):
            out = _run(p["jaxpr"], rule, *consts, *carry, *x)
            return out[:ncarry], out[ncarry:]

        carry, ys = lax.scan(
            step, list(init), list(xs), length=p["length"], reverse=p["reverse"], unroll=p["unroll"]
        )
        return [*carry, *ys]
    if name == "while":
        cn, bn = p["cond_nconsts"], p["body_nconsts"]
        cconsts, bconsts, init = invals[:cn], invals[cn : cn + bn], invals[cn + bn :]
        return lax.while_loop(
            lambda c: _run(p["cond_jaxpr"], rule, *cconsts, *c)[0],
            lambda c: _run(p["body_jaxpr"], rule, *bconsts, *c),
            list(init),
        )
    if name == "cond":
        index, *ops = invals
        branches = [functools.partial(_run, br, rule) for br in p["branches"]]
        return lax.switch(index, branches, *ops)
    if name in REMATS:
        body = functools.partial(_run, p["jaxpr"], rule)
        return jax.checkpoint(body, prevent_cse=p["prevent_cse"], policy=p["policy"])(*invals)
    raise NotImplementedError(
        f"on_kernel: a {name!r} equation holds a dot_general; emulating dots inside {name!r} "
        "is not supported"
    )


def _run(body, rule: DotRule, *args) -> list:
    """Evaluate a ``Jaxpr`` or ``ClosedJaxpr`` body."""
    if isinstance(body, jcore.ClosedJaxpr):
        return evaluate(body.jaxpr, body.consts, rule, *args)
    return evaluate(body, (), rule, *args)


# ---------------------------------------------------------------------------- the dot


def dot_dims(dimension_numbers) -> tuple:
    """A ``dot_general``'s dimension numbers as hashable tuples."""
    (lc, rc), (lb, rb) = dimension_numbers
    return ((tuple(lc), tuple(rc)), (tuple(lb), tuple(rb)))


def is_float_dot(eqn) -> bool:
    """True for a ``dot_general`` equation whose operands and result are all floating point."""
    return all(jnp.issubdtype(v.aval.dtype, jnp.floating) for v in (*eqn.invars, *eqn.outvars))


def _emulated_dot(lhs, rhs, dims: tuple, rule: DotRule, out_dtype):
    return _ste_dot(lhs, rhs, dims, rule, np.dtype(out_dtype))


@functools.partial(jax.custom_vjp, nondiff_argnums=(2, 3, 4))
def _ste_dot(lhs, rhs, dims, rule: DotRule, out_dtype):
    from kernel_contracts.kernels._matmul import emulated_dot_general

    k = int(np.prod([np.shape(lhs)[d] for d in dims[0][0]], dtype=np.int64))
    out = emulated_dot_general(lhs, rhs, dims, rule.matmul, impl=rule.impl, splits=rule.splits(k))
    return out.astype(out_dtype)


def _ste_fwd(lhs, rhs, dims, rule, out_dtype):
    return _ste_dot(lhs, rhs, dims, rule, out_dtype), (lhs, rhs)


def _ste_bwd(dims, rule, out_dtype, saved, g):
    lhs, rhs = saved

    def exact(a, b):
        return lax.dot_general(
            a, b, dims, precision=lax.Precision.HIGHEST, preferred_element_type=out_dtype
        )

    return jax.vjp(exact, lhs, rhs)[1](g)


_ste_dot.defvjp(_ste_fwd, _ste_bwd)


# ------------------------------------------------------------------ what a jaxpr holds


def _subjaxprs(eqn) -> list[jcore.Jaxpr]:
    return [j.jaxpr if isinstance(j, jcore.ClosedJaxpr) else j for j in _params_jaxprs(eqn)]


def _params_jaxprs(eqn) -> list:
    found = []
    for value in eqn.params.values():
        items = value if isinstance(value, tuple | list) else (value,)
        found += [v for v in items if isinstance(v, jcore.Jaxpr | jcore.ClosedJaxpr)]
    return found


@functools.lru_cache(maxsize=4096)
def _primitives(jaxpr: jcore.Jaxpr) -> frozenset[str]:
    """Names of every primitive ``jaxpr`` binds, sub-jaxprs included (float dots only)."""
    names: set[str] = set()
    for eqn in jaxpr.eqns:
        if eqn.primitive.name != "dot_general" or is_float_dot(eqn):
            names.add(eqn.primitive.name)
        for sub in _subjaxprs(eqn):
            names |= _primitives(sub)
    return frozenset(names)


def has_dot(eqn) -> bool:
    """True when a sub-jaxpr of ``eqn`` (a call, a loop body) holds a float ``dot_general``."""
    return any("dot_general" in _primitives(sub) for sub in _subjaxprs(eqn))


def attention_dots(jaxpr: jcore.Jaxpr) -> frozenset[int]:
    """Indices of the equations of ``jaxpr`` that are the two products of a softmax attention.

    Each value carries the dots it was computed from (since the last dot) and which of
    ``exp`` / ``reduce_sum`` lie on the way; a dot with an operand that saw both after another
    dot is attention, and so are the dots that operand came from.
    """
    marks: dict = {}  # var -> (dot equation indices, softmax primitives seen)
    found: set[int] = set()
    for i, eqn in enumerate(jaxpr.eqns):
        ins = [marks[v] for v in eqn.invars if not isinstance(v, jcore.Literal) and v in marks]
        if eqn.primitive.name == "dot_general" and is_float_dot(eqn):
            for origins, seen in ins:
                if seen >= _SOFTMAX:
                    found |= origins | {i}
            out = (frozenset({i}), frozenset())
        elif has_dot(eqn) or not ins:
            out = None
        else:
            inner = set().union(*(_primitives(s) for s in _subjaxprs(eqn)))
            seen = frozenset().union(*(s for _, s in ins)) | (
                (inner | {eqn.primitive.name}) & _SOFTMAX
            )
            out = (frozenset().union(*(o for o, _ in ins)), seen)
        for v in eqn.outvars:
            if out is not None:
                marks[v] = out
    return frozenset(found)
