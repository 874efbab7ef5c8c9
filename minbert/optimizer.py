"""AdamW: Adam with decoupled weight decay, written out step by step.

References
----------
* Kingma & Ba (2015), "Adam: A Method for Stochastic Optimization", ICLR.
  Algorithm 1 (moment estimates) and the "more efficient" ordering of §2, where the two
  bias corrections are folded into the step size:

      m_t = β1 · m_{t-1} + (1 - β1) · g_t                      (first moment)
      v_t = β2 · v_{t-1} + (1 - β2) · g_t²                     (second moment)
      α_t = α · sqrt(1 - β2^t) / (1 - β1^t)                    (bias-corrected step size)
      θ_t = θ_{t-1} - α_t · m_t / (sqrt(v_t) + ε)

* Loshchilov & Hutter (2019), "Decoupled Weight Decay Regularization", ICLR.
  Algorithm 2 (AdamW): the weight decay is applied to the parameters directly instead of
  being added to the gradient, so it is not rescaled by the adaptive denominator:

      θ_{t-1} ← θ_{t-1} - α · λ · θ_{t-1}

  As in ``torch.optim.AdamW`` (and the original BERT code), the learning rate α is folded
  into the decay (the schedule multiplier η_t of the paper is α / α_0 here), and the decay
  is applied before the Adam update of the same step.

Note on ε: the efficient form adds ε to sqrt(v_t) *before* the bias correction is applied,
whereas ``torch.optim.AdamW`` adds it after (denominator sqrt(v_t) / sqrt(1 - β2^t) + ε).
The two are identical for ε = 0 and differ only by the effective size of ε early in
training. With ``correct_bias=False`` there is no correction at all: α_t = α.
"""
from __future__ import annotations

import math
from typing import Callable, Iterable

import torch
from torch.optim import Optimizer


class AdamW(Optimizer):
    """Adam with decoupled weight decay (Loshchilov & Hutter 2019, Algorithm 2).

    Args:
        params: parameters to optimise, or a list of parameter-group dicts.
        lr: learning rate α.
        betas: (β1, β2), decay rates of the first and second moment estimates, each in [0, 1).
        eps: ε added to the denominator sqrt(v_t) for numerical stability.
        weight_decay: decoupled weight decay λ (multiplied by the learning rate).
        correct_bias: apply Adam's bias correction (Kingma & Ba 2015, §2 efficient form).
    """

    def __init__(
        self,
        params: Iterable,
        lr: float = 1e-3,
        betas: tuple[float, float] = (0.9, 0.999),
        eps: float = 1e-6,
        weight_decay: float = 0.0,
        correct_bias: bool = True,
    ):
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
        defaults = dict(
            lr=lr, betas=tuple(betas), eps=eps, weight_decay=weight_decay, correct_bias=correct_bias
        )
        super().__init__(params, defaults)

    @torch.no_grad()
    def step(self, closure: Callable[[], float] | None = None):
        """Perform one optimisation step; ``closure`` re-evaluates the model and returns the loss."""
        loss = None
        if closure is not None:
            with torch.enable_grad():
                loss = closure()

        for group in self.param_groups:
            lr = group["lr"]
            beta1, beta2 = group["betas"]
            eps = group["eps"]
            weight_decay = group["weight_decay"]

            for p in group["params"]:
                if p.grad is None:
                    continue
                grad = p.grad
                if grad.is_sparse:
                    raise RuntimeError(
                        "AdamW does not support sparse gradients; use a dense embedding "
                        "(sparse=False) or torch.optim.SparseAdam"
                    )

                state = self.state[p]
                if len(state) == 0:
                    state["step"] = 0
                    state["exp_avg"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                    state["exp_avg_sq"] = torch.zeros_like(p, memory_format=torch.preserve_format)
                exp_avg, exp_avg_sq = state["exp_avg"], state["exp_avg_sq"]
                state["step"] += 1
                t = state["step"]

                # Decoupled weight decay (the λ·θ term of Loshchilov & Hutter 2019, Alg. 2),
                # with the learning rate folded in: θ ← θ - α·λ·θ.
                if weight_decay != 0.0:
                    p.mul_(1.0 - lr * weight_decay)

                # Biased moment estimates (Kingma & Ba 2015, Alg. 1):
                # m_t = β1·m + (1-β1)·g ;  v_t = β2·v + (1-β2)·g².
                exp_avg.mul_(beta1).add_(grad, alpha=1.0 - beta1)
                exp_avg_sq.mul_(beta2).addcmul_(grad, grad, value=1.0 - beta2)

                # Step size; with bias correction, the efficient form of Kingma & Ba §2:
                # α_t = α · sqrt(1 - β2^t) / (1 - β1^t).
                if group["correct_bias"]:
                    step_size = lr * math.sqrt(1.0 - beta2**t) / (1.0 - beta1**t)
                else:
                    step_size = lr

                # θ_t = θ - α_t · m_t / (sqrt(v_t) + ε).
                denom = exp_avg_sq.sqrt().add_(eps)
                p.addcdiv_(exp_avg, denom, value=-step_size)

        return loss
