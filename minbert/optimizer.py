"""AdamW: Adam with decoupled weight decay, written out step by step.

* Kingma & Ba (2015), "Adam: A Method for Stochastic Optimization", ICLR: the moment estimates of
  Algorithm 1, with the bias corrections folded into the step size (the "more efficient" ordering of §2):

      m_t = β1 · m_{t-1} + (1 - β1) · g_t,    v_t = β2 · v_{t-1} + (1 - β2) · g_t²
      α_t = α · sqrt(1 - β2^t) / (1 - β1^t),  θ_t = θ_{t-1} - α_t · m_t / (sqrt(v_t) + ε)

* Loshchilov & Hutter (2019), "Decoupled Weight Decay Regularization", ICLR, Algorithm 2: the decay
  θ ← θ - α·λ·θ acts on the parameters, not the gradient, so the adaptive denominator does not rescale
  it. As in ``torch.optim.AdamW`` and the BERT code, α is folded in (the paper's schedule multiplier η_t
  is α / α_0) and the decay precedes the Adam update.

ε is added to sqrt(v_t) before the bias correction; ``torch.optim.AdamW`` adds it after
(sqrt(v_t) / sqrt(1 - β2^t) + ε): the same for ε = 0, else only ε's effective size early in training differs.

Three routes to the update (flags and timings: docs/performance.md): ``_step_loop``, the reference, one
line per equation (``_update``), in cache-sized blocks on the CPU (MiniLM step, 2 threads: 72 -> 66 ms);
``_step_foreach``, each line on a whole tensor list, bit-identical to the loop (fast on CUDA, not on the
CPU); ``_step_fused``, PyTorch's kernel, one pass over memory instead of seven (MiniLM, 2 threads: 18
instead of 70 ms), given ε/sqrt(1 - β2^t) so that it computes our ε placement; not bit-identical (it orders
the arithmetic differently).

Sparse gradients (``BertModel.set_sparse_word_embeddings``) take ``_step_rows``: *lazy* Adam (as TF
Addons' ``LazyAdam``) updates only the rows with a gradient this step; the other rows (parameters,
moments, weight decay) wait until their token appears again, where dense AdamW would still move them:
a different optimizer, not a faster route to the same numbers. t is the parameter's step count, as in dense Adam.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
from torch.optim import Optimizer
from torch.optim.adamw import adamw as fused_adamw  # the functional API; called with fused=True

# Elements per block of the CPU loop: θ, g, m, v and the denominator, 64k float32 each, take 1.25 MB,
# inside a 2 MB per-core L2 cache (of 16k..1M, 64k-256k were fastest here with 1 and 2 threads).
CPU_BLOCK = 1 << 16
FUSED_DEVICES = ("cpu", "cuda")  # where PyTorch has a fused AdamW kernel: the default update there


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2).

    ``weight_decay`` λ is multiplied by the learning rate; ``correct_bias=False`` takes α_t = α (never fused).
    ``foreach``: True = ``torch._foreach_*`` update, False = per-parameter loop, None = foreach when a group's
    parameters share one non-CPU device and dtype, else the loop; a value given turns the fused kernel off.
    ``fused``: True = PyTorch's fused kernel, False = ``foreach`` decides, None (default) = fused on the
    CPU or CUDA unless ``foreach`` is given.
    """

    def __init__(self, params: Iterable, lr: float = 1e-3, betas: tuple[float, float] = (0.9, 0.999),
                 eps: float = 1e-6, weight_decay: float = 0.0, correct_bias: bool = True,
                 foreach: bool | None = None, fused: bool | None = None):
        if not lr >= 0.0:
            raise ValueError(f"Invalid learning rate: {lr} (must be >= 0)")
        if len(betas) != 2:
            raise ValueError(f"Invalid betas: {betas} (expected a pair (beta1, beta2))")
        for i, beta in enumerate(betas):
            if not 0.0 <= beta < 1.0:
                raise ValueError(f"Invalid beta parameter at index {i}: {beta} (must be in [0, 1))")
        if not eps >= 0.0:
            raise ValueError(f"Invalid epsilon value: {eps} (must be >= 0)")
        if not weight_decay >= 0.0:
            raise ValueError(f"Invalid weight_decay value: {weight_decay} (must be >= 0)")
        defaults = dict(lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, correct_bias=correct_bias)
        super().__init__(params, defaults)
        self.foreach, self.fused = foreach, fused

    # torch.optim.Optimizer wraps these four in torch._disable_dynamo, whose first call imports torch._dynamo:
    # about 2 s of every run's start on 2 CPU cores, for a guard that matters only when torch.compile traces
    # code calling them. Nothing here is compiled (--compile compiles the encoder), so call the bodies beneath.
    def add_param_group(self, param_group: dict) -> None:
        _undecorated(Optimizer.add_param_group)(self, param_group)

    def zero_grad(self, set_to_none: bool = True) -> None:
        _undecorated(Optimizer.zero_grad)(self, set_to_none)

    def state_dict(self) -> dict:
        return _undecorated(Optimizer.state_dict)(self)

    def load_state_dict(self, state_dict: dict) -> None:
        _undecorated(Optimizer.load_state_dict)(self, state_dict)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        """Perform one optimisation step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            for p in (p for p in params if p.grad.is_sparse):
                self._step_rows(group, p)
            params = [p for p in params if not p.grad.is_sparse]
            fused = self.fused
            if fused is None:
                fused = self.foreach is None and all(p.device.type in FUSED_DEVICES for p in params)
            if fused and group["correct_bias"]:
                self._step_fused(group, params)
                continue
            foreach = self.foreach
            if foreach is None:
                kinds = {(p.device, p.dtype) for p in params}
                foreach = len(kinds) == 1 and next(iter(kinds))[0].type != "cpu"
            if foreach:
                self._step_foreach(group, params)
            else:
                self._step_loop(group, params)
        return loss

    def _state(self, p: torch.Tensor) -> dict:
        """The parameter's moments (created as zeros on first use), with its step count advanced."""
        state = self.state[p]
        if len(state) == 0:
            state["step"] = 0
            state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
        state["step"] += 1
        return state

    def _step_size(self, group: dict, t: int) -> float:
        """α_t = α · sqrt(1 - β2^t) / (1 - β1^t) (Kingma & Ba §2) with bias correction, else α."""
        beta1, beta2 = group["betas"]
        if group["correct_bias"]:
            return group["lr"] * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
        return group["lr"]

    def _step_loop(self, group: dict, params: list[torch.Tensor]) -> None:
        """The reference: one parameter at a time (in cache-sized blocks on the CPU)."""
        for p in params:
            state = self._state(p)
            step_size = self._step_size(group, state["step"])
            for block in _blocks(p, p.grad, state["exp_avg"], state["exp_avg_sq"]):
                _update(*block, group, step_size)

    def _step_rows(self, group: dict, p: torch.Tensor) -> None:
        """Lazy Adam (module docstring) for a sparse row gradient: ``_update`` on copies of its rows, written back."""
        if p.grad.sparse_dim() != 1:
            raise ValueError("AdamW takes sparse gradients of whole rows (sparse_dim 1, as from "
                             f"nn.Embedding(sparse=True)), got sparse_dim {p.grad.sparse_dim()}")
        grad = p.grad.coalesce()          # one entry per row: duplicate rows' gradients summed
        rows, values = grad.indices()[0], grad.values()
        state = self._state(p)
        step_size = self._step_size(group, state["step"])
        full = (p, state["exp_avg"], state["exp_avg_sq"])
        theta, exp_avg, exp_avg_sq = (t[rows] for t in full)      # copies of the rows
        _update(theta, values, exp_avg, exp_avg_sq, group, step_size)
        for t, updated in zip(full, (theta, exp_avg, exp_avg_sq)):
            t.index_copy_(0, rows, updated)

    def _step_fused(self, group: dict, params: list[torch.Tensor]) -> None:
        """The same update in one fused kernel call per (device, dtype, step count)."""
        beta1, beta2 = group["betas"]
        lists: dict[tuple, list[tuple[torch.Tensor, dict]]] = {}
        for p in params:
            state = self._state(p)
            lists.setdefault((p.device, p.dtype, state["step"]), []).append((p, state))
        for (device, _, t), items in lists.items():
            ps = [p for p, _ in items]
            # the kernel divides sqrt(v) by sqrt(1 - β2^t) before adding ε; this ε makes it ours
            eps = group["eps"] / math.sqrt(1.0 - beta2**t)
            steps = [torch.tensor(float(t - 1), device=device) for _ in ps]  # the call counts this step itself
            fused_adamw(ps, [p.grad for p in ps], [s["exp_avg"] for _, s in items], [s["exp_avg_sq"] for _, s in items],
                        [], steps, fused=True, lr=group["lr"], beta1=beta1, beta2=beta2,
                        weight_decay=group["weight_decay"], eps=eps, amsgrad=False, maximize=False)

    def _step_foreach(self, group: dict, params: list[torch.Tensor]) -> None:
        """The same update as ``_step_loop``, each line on a whole tensor list (one per device and dtype)."""
        lr, weight_decay = group["lr"], group["weight_decay"]
        beta1, beta2 = group["betas"]
        by_kind: dict[tuple, list[torch.Tensor]] = {}
        for p in params:
            by_kind.setdefault((p.device, p.dtype), []).append(p)
        for ps in by_kind.values():
            grads = [p.grad for p in ps]
            states = [self._state(p) for p in ps]
            exp_avgs = [s["exp_avg"] for s in states]
            exp_avg_sqs = [s["exp_avg_sq"] for s in states]
            if weight_decay != 0.0:                                   # θ ← θ - α·λ·θ
                torch._foreach_mul_(ps, 1.0 - lr * weight_decay)
            torch._foreach_mul_(exp_avgs, beta1)                      # m ← β1·m + (1-β1)·g
            torch._foreach_add_(exp_avgs, grads, alpha=1.0 - beta1)
            torch._foreach_mul_(exp_avg_sqs, beta2)                   # v ← β2·v + (1-β2)·g²
            torch._foreach_addcmul_(exp_avg_sqs, grads, grads, value=1.0 - beta2)
            denoms = torch._foreach_sqrt(exp_avg_sqs)                 # sqrt(v) + ε
            torch._foreach_add_(denoms, group["eps"])
            step_sizes = [-self._step_size(group, s["step"]) for s in states]  # θ ← θ - α_t·m/(sqrt(v)+ε)
            torch._foreach_addcdiv_(ps, exp_avgs, denoms, step_sizes)


def _undecorated(method: Callable) -> Callable:
    """``method`` without the decorator that ``functools.wraps`` recorded (itself if it has none)."""
    return getattr(method, "__wrapped__", method)


def _update(p: torch.Tensor, grad: torch.Tensor, exp_avg: torch.Tensor, exp_avg_sq: torch.Tensor,
            group: dict, step_size: float) -> None:
    """One AdamW step on one tensor (or one block of it), in place; one line per equation."""
    lr, weight_decay, eps = group["lr"], group["weight_decay"], group["eps"]
    beta1, beta2 = group["betas"]
    # Decoupled weight decay (Loshchilov & Hutter 2019, Alg. 2), learning rate folded in: θ ← θ - α·λ·θ.
    if weight_decay != 0.0:
        p.mul_(1.0 - lr * weight_decay)
    # Biased moment estimates (Kingma & Ba 2015, Alg. 1): m_t = β1·m + (1-β1)·g ;  v_t = β2·v + (1-β2)·g².
    exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
    exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)
    # θ_t = θ - α_t · m_t / (sqrt(v_t) + ε), α_t the bias-corrected step size.
    denom = exp_avg_sq.sqrt().add_(eps)
    p.addcdiv_(exp_avg, denom, value=-step_size)


def _blocks(*tensors: torch.Tensor):
    """Matching flat slices of ``CPU_BLOCK`` elements of same-shaped contiguous CPU tensors, or
    the whole tensors where blocking does not apply (small, on a GPU, or non-contiguous)."""
    first = tensors[0]
    n = first.numel()
    if (n <= CPU_BLOCK or first.device.type != "cpu"
            or not all(t.is_contiguous() and t.shape == first.shape for t in tensors)):
        yield tensors
        return
    flat = [t.view(-1) for t in tensors]
    for start in range(0, n, CPU_BLOCK):
        yield tuple(t[start : start + CPU_BLOCK] for t in flat)


# Biases and LayerNorm weights: HF's ``LayerNorm`` and our layers' ``attention_norm`` / ``output_norm``
NO_DECAY_SUFFIXES = ("bias", "LayerNorm.weight", "_norm.weight")


def decay_groups(named_parameters: Iterable[tuple[str, torch.nn.Parameter]], weight_decay: float,
                 **options) -> list[dict]:
    """Two parameter groups for ``AdamW``: weights with ``weight_decay``, and biases and LayerNorm
    weights without. BERT's optimizer excludes them (Devlin et al. 2019, released code:
    ``exclude_from_weight_decay=["LayerNorm", "layer_norm", "bias"]``): decaying a bias or a norm's
    gain towards 0 regularises nothing useful. ``options`` (e.g. ``lr``) go in both groups; empty
    groups are left out."""
    decay, no_decay = [], []
    for name, parameter in named_parameters:
        (no_decay if name.endswith(NO_DECAY_SUFFIXES) else decay).append(parameter)
    groups = [{"params": decay, "weight_decay": weight_decay, **options},
              {"params": no_decay, "weight_decay": 0.0, **options}]
    return [group for group in groups if group["params"]]


def check_all_trained(model: torch.nn.Module, optimizer) -> None:
    """A parameter that would get gradients but no update is a mistake (a module added to the model, in no group):
    refuse it, naming it, unless it is frozen."""
    held = {id(p) for group in (optimizer.param_groups if optimizer is not None else ()) for p in group["params"]}
    for name, parameter in model.named_parameters():
        if parameter.requires_grad and id(parameter) not in held:
            raise ValueError(f"model parameter {name} is trained by no optimizer group: add it to a ParamSet or "
                             f"freeze it (requires_grad False)")
