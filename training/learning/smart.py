"""SMART: smoothness-inducing adversarial regularisation and momentum Bregman proximal point
(Jiang et al. 2020, "SMART: Robust and Efficient Fine-Tuning for Pre-trained Natural Language
Models through Principled Regularized Optimization", ACL): ``smart_loss`` is the adversarial
regulariser of §3.1, ``BregmanProximal`` the momentum proximal term of §3.2, ``divergence`` ℓ_s of Eq. 3.

Where the paper leaves details open we follow the authors' MT-DNN code (namisan/mt-dnn,
``mt_dnn/perturbation.py`` and ``SymKlCriterion``): the ∞-norm of the ascent step is taken per
token over the hidden dimension, no projection onto the ε-ball follows the step, and the final
regulariser lets gradients reach the model through both the perturbed and the clean output.
"""
from __future__ import annotations

import copy
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import nn

# What a head outputs (``Task.divergence``): class logits, one log-odds per example, or a score.
KINDS = ("multiclass", "binary", "regression")


def divergence(perturbed: torch.Tensor, clean: torch.Tensor, kind: str) -> torch.Tensor:
    """ℓ_s of SMART Eq. 3 between two batches of head outputs, averaged over the batch.

    ``multiclass``: symmetric KL between softmax distributions, KL(p‖q) + KL(q‖p);
    ``binary``: the same between Bernoulli(sigmoid) distributions of one logit per example;
    ``regression``: squared error (§3.1: "ℓ_s is the squared loss for regression").
    The symmetric KL is Σ_k (p_k − q_k)(log p_k − log q_k): a product of two small differences, not a
    difference of two nearly equal cross-entropies, so it stays accurate for SMART's tiny
    perturbations (and exactly symmetric). Gradients flow through both arguments.
    """
    _check_kind(kind)
    if kind == "regression":
        return (perturbed - clean).pow(2).mean()
    log_p, log_q = _log_probs(perturbed, kind), _log_probs(clean, kind)
    return ((log_p.exp() - log_q.exp()) * (log_p - log_q)).sum(-1).mean()


@dataclass(frozen=True)
class Ascent:
    """The search for the adversarial noise (SMART Algorithm 1, lines 4–8): σ = ``eps``, the std of
    the initial noise; η = ``step``; T_x̃ = ``steps``; ``eps_norm`` keeps the step's normalisation finite."""
    eps: float = 1e-5
    step: float = 1e-3
    steps: int = 1
    eps_norm: float = 1e-6


def smart_loss(model: nn.Module, head_name: str, inputs: list[dict], clean_output: torch.Tensor,
               kind: str, weight: float = 0.5, ascent: Ascent = Ascent()) -> torch.Tensor:
    """λ_s · R_s(θ), the smoothness-inducing adversarial regulariser (SMART §3.1, Eq. 3; Algorithm 1
    lines 4–8, with λ_s = ``weight`` and the noise search ``ascent``).

    The embeddings output of every sentence of the task (both of a pair) gets its own Gaussian noise
    δ ~ N(0, σ²I). Each ascent step maximises ``divergence(f(x + δ), f(x).detach())`` over δ only,

        δ ← δ + η · g / (‖g‖_∞ + eps_norm),   g = ∇_δ ℓ_s,   ‖·‖_∞ per token over the hidden size,

    by ``torch.autograd.grad``, so nothing accumulates in the model's ``.grad``. The returned term is
    taken at the final δ (held constant) with the authors' stop-gradients (``_two_sided``).

    ``clean_output`` must be ``model(head_name, inputs)`` from the same step, not detached (the clean
    side gets its gradient). With dropout on, the adversarial passes draw their own masks, as in the
    authors' code; noise at padding positions is harmless (padding keys are masked in attention).
    """
    _check_kind(kind)
    noise = EmbeddingNoise(ascent.eps)
    target = clean_output.detach()
    for _ in range(ascent.steps):
        adversarial = noise.run(model, head_name, inputs, track=True)
        grads = torch.autograd.grad(divergence(adversarial, target, kind), noise.tensors, materialize_grads=True)
        noise.ascend(grads, ascent.step, ascent.eps_norm)
    adversarial = noise.run(model, head_name, inputs, track=False)
    return weight * _two_sided(adversarial, clean_output, kind)


class BregmanProximal:
    """μ · D_Breg(θ, θ̃_t), the momentum Bregman proximal point term (SMART §3.2, Eq. 4–5).

    D_Breg(θ, θ̃) = (1/n) Σ ℓ_s(f(x_i; θ), f(x_i; θ̃)) keeps each update close, in output space,
    to θ̃_t = (1 − β) θ_t + β θ̃_{t−1}, an exponential moving average of the parameters kept in a
    frozen copy of the model. The copy runs in eval mode, so its outputs are a deterministic
    target (with dropout off in the model, the penalty is exactly 0 while θ = θ̃). Build it
    after moving the model to its device: the copy stays where the model was.
    """

    def __init__(self, model: nn.Module, mu: float = 1.0, beta: float = 0.99):
        if not 0 <= beta < 1:
            raise ValueError(f"beta must be in [0, 1), got {beta}")
        self.mu, self.beta = mu, beta
        self.ema = copy.deepcopy(model).eval().requires_grad_(False)
        for param in self.ema.parameters():
            param.grad = None   # deepcopy also copies any gradients the model holds

    def penalty(self, model_output: torch.Tensor, head_name: str, inputs: list[dict], kind: str) -> torch.Tensor:
        """μ · ℓ_s(f(x; θ), f(x; θ̃)) on this batch; gradients reach θ through ``model_output``."""
        with torch.no_grad():
            ema_output = self.ema(head_name, inputs)
        return self.mu * divergence(model_output, ema_output, kind)

    @torch.no_grad()
    def update(self, model: nn.Module) -> None:
        """θ̃ ← β θ̃ + (1 − β) θ (Eq. 5's momentum); call after each optimizer step."""
        for ema_param, param in zip(self.ema.parameters(), model.parameters(), strict=True):
            ema_param.lerp_(param, 1.0 - self.beta)
        for ema_buffer, buffer in zip(self.ema.buffers(), model.buffers(), strict=True):
            ema_buffer.copy_(buffer)


class EmbeddingNoise:
    """An ``embeddings_hook`` that adds one noise tensor per sentence of a forward: ``MultitaskBert.forward``
    calls it once per sentence, in order, with (B, T_k, H) tensors; the k-th call adds ``tensors[k]``, created on
    first use as N(0, eps²). ``run`` resets the call counter, so every pass of ``smart_loss`` perturbs each
    sentence with its own, current noise."""

    def __init__(self, eps: float):
        self.eps, self.calls, self._track = eps, 0, False
        self.tensors: list[torch.Tensor] = []

    def run(self, model: nn.Module, head_name: str, inputs: list[dict], track: bool) -> torch.Tensor:
        """``model(head_name, inputs)`` plus noise; ``track``: autograd follows it (ascent) or not (final pass)."""
        self.calls, self._track = 0, track
        for noise in self.tensors:
            noise.requires_grad_(track)
        output = model(head_name, inputs, embeddings_hook=self)
        if self.calls != len(self.tensors):
            raise RuntimeError(f"the model called the embeddings hook {self.calls} times in this "
                               f"forward but {len(self.tensors)} before")
        return output

    def __call__(self, embeddings: torch.Tensor) -> torch.Tensor:
        index, self.calls = self.calls, self.calls + 1
        if index == len(self.tensors):
            noise = torch.randn_like(embeddings).mul_(self.eps).detach()
            self.tensors.append(noise.requires_grad_(self._track))
        noise = self.tensors[index]
        if noise.shape != embeddings.shape:
            raise RuntimeError(f"embeddings of shape {tuple(embeddings.shape)} at call {index}, "
                               f"but its noise has shape {tuple(noise.shape)}")
        return embeddings + noise

    def ascend(self, grads, step: float, eps_norm: float) -> None:
        """``smart_loss``'s ascent step (Algorithm 1 line 6, normalised as in the authors' ``_norm_grad``)."""
        self.tensors = [
            (noise + step * grad / (grad.abs().amax(dim=-1, keepdim=True) + eps_norm)).detach()
            for noise, grad in zip(self.tensors, grads, strict=True)
        ]


def _two_sided(adversarial: torch.Tensor, clean: torch.Tensor, kind: str) -> torch.Tensor:
    """ℓ_s with the authors' stop-gradient pattern (MT-DNN ``SymKlCriterion``): each KL term
    differentiates one output against the other held fixed; the value is ``divergence``'s."""
    if kind == "regression":
        return divergence(adversarial, clean, kind)
    log_adv, log_clean = _log_probs(adversarial, kind), _log_probs(clean, kind)
    return _kl(log_clean.detach(), log_adv) + _kl(log_adv.detach(), log_clean)


def _kl(log_p: torch.Tensor, log_q: torch.Tensor) -> torch.Tensor:
    """KL(p‖q) from log-probabilities over the last dimension, averaged over the batch."""
    return F.kl_div(log_q, log_p, reduction="none", log_target=True).sum(-1).mean()


def _log_probs(output: torch.Tensor, kind: str) -> torch.Tensor:
    """Log-probabilities over the last dimension: log-softmax of class logits, or (log σ(z), log σ(−z))."""
    if kind == "multiclass":
        return F.log_softmax(output, dim=-1)
    return torch.stack([F.logsigmoid(output), F.logsigmoid(-output)], dim=-1)


def _check_kind(kind: str) -> None:
    if kind not in KINDS:
        raise ValueError(f"unknown output kind {kind!r}; choose one of {KINDS}")
