"""Distillation: a shallower body that reproduces the fine-tuned body's sentence embeddings.

The student starts as the teacher cut down to some of its encoder layers (``keep_layers``) and learns to
give each training message (and each clause the router will read) the teacher's normalised embedding
(squared error) and, at each of its layers, the teacher's token states where that layer's span of teacher
layers ends (relative squared error, ``hidden_weight``; TinyBERT-style). The heads are then fitted on the
student, so everything downstream (calibration, the in-scope distance, the compound head, export) sees one
body, the student.

Measured on this corpus (3-layer student [0, 2, 4] of the 6-layer body; dev figures, docs/speed.md):
- the same 3 layers trained directly by SetFit lost 3-4 points of accuracy; distilled, they keep them;
- the clauses are what a short distillation learns worst: by the embedding alone, 8 epochs found 89% of
  dev two-intent messages and 6 epochs 78-80%; with the token states as well, 5 epochs found 88%;
- ``clause_weight`` adds a third target for a router that reads clauses in context (router.manifest.
  ClauseReader): the mean of the student's last token states over each clause of a message, normalised,
  should be the teacher's embedding of that clause read alone. Without it, reading the clauses in
  context lost 1-5 of 99 two-intent messages; with it, the in-context reading found as many as the
  clauses read alone (docs/speed.md).
- ``head_weight`` adds the teacher's decision: the student's embedding, through a head fitted on the
  teacher's, should give the teacher's probabilities. It lifted dev single-intent accuracy by about a
  point and cost a few two-intent messages on the blind set
- ``ffn_width`` 768 (half of MiniLM's feed-forward neurons) made the graph 1.3-1.6x faster on an AVX2
  CPU; over two seeds it cost 0.8-0.9 points of dev accuracy and 2-3% of two-intent messages. Two layers
  instead of three, for the same arithmetic, cost 15% of them
"""

from __future__ import annotations

import copy
import time
from collections.abc import Callable, Mapping, Sequence

Reporter = Callable[[str], None]
_MODEL_INPUTS = ("input_ids", "attention_mask", "token_type_ids")


def distil_body(
    teacher,
    layers: Sequence[int],
    texts: Sequence[str],
    *,
    epochs: int,
    learning_rate: float,
    batch_size: int,
    seed: int,
    hidden_weight: float = 1.0,
    freeze_embeddings: bool = True,
    dropout: bool = True,
    clause_weight: float = 0.0,
    labels: Mapping[str, str] | None = None,
    head_weight: float = 0.0,
    head_params: Mapping | None = None,
    ffn_width: int | None = None,
    bf16: bool = False,
    report: Reporter = print,
    show_progress: bool = True,
):
    """A copy of ``teacher`` (a sentence-transformers body) keeping ``layers``, trained to match the
    teacher on ``texts``. Batches hold messages of similar length (less padding), in a seeded shuffled
    order; the learning rate warms up over the first 10% of steps, then decays to 0.

    The teacher's targets are computed once, before training (its token states kept in float16: about
    12 KB per text and student layer at 16 tokens). ``hidden_weight`` 0 trains on the embedding alone.
    ``freeze_embeddings`` keeps the token embedding table (30,522 x 384 for MiniLM, two thirds of a
    3-layer student's weights) as the teacher left it: AdamW's update of that dense table took 40% of a
    step. ``dropout`` off trains in eval mode (faster, but measured worse on clauses). ``clause_weight`` > 0
    adds the clauses-in-context target (module docstring). ``head_weight`` > 0 adds the teacher's decision
    (its labels' probabilities): a logistic head (scikit-learn, ``head_params``: the model head's) fitted on the
    teacher's embeddings of the ``labels`` texts, applied to every text's embedding, gives the target
    probabilities (KL divergence). ``ffn_width`` keeps that many feed-forward neurons in each student layer:
    those whose mean absolute activation on ``texts``, in the teacher, times the norm of their output
    weights is largest (``narrow_ffn``). ``bf16``: the steps under CPU autocast to bfloat16
    (training.distil.loop)."""
    import torch

    from training.distil.loop import length_batches, train_epochs

    texts = list(dict.fromkeys(texts))
    if not texts:
        raise ValueError("distillation needs texts")
    n_teacher = len(teacher[0].auto_model.encoder.layer)
    student = copy.deepcopy(teacher)
    keep_layers(student, layers)  # checks the layers before the teacher's targets are computed
    if ffn_width is not None:
        check_ffn_width(ffn_width, student[0].auto_model.config.intermediate_size)
    torch.manual_seed(seed)
    batches = length_batches(teacher.tokenizer, texts, batch_size)
    pairs = _layer_pairs(layers, n_teacher) if hidden_weight > 0 else []

    t0 = time.perf_counter()
    targets, scales = _teacher_targets(teacher, student, texts, batches, pairs, layers, ffn_width, report)
    report(f"distillation targets from the teacher: {time.perf_counter() - t0:.0f}s")
    loss = ShallowLoss(student, targets, pairs, scales, hidden_weight)
    head = (
        teacher_head(texts, batches, [t[1] for t in targets], labels or {}, head_params or {})
        if head_weight
        else None
    )
    if head is not None:  # the teacher's log-probabilities, once per batch
        loss.with_head(head, head_weight)
        report(f"teacher head on {len(labels or {})} labeled texts: {time.perf_counter() - t0:.0f}s")
    clause_targets = (
        _clause_targets(teacher, texts, batches, [t[0] for t in targets]) if clause_weight > 0 else []
    )
    if clause_targets:
        n = sum(len(c[0]) for c in clause_targets if c is not None)
        report(f"clauses in context: {n} clause targets, {time.perf_counter() - t0:.0f}s")
        loss.clause_targets, loss.clause_weight = clause_targets, clause_weight
    train_epochs(
        loss,
        student,
        learning_rate=learning_rate,
        freeze_embeddings=freeze_embeddings,
        dropout=dropout,
        batches=len(batches),
        epochs=epochs,
        seed=seed,
        started=t0,
        report=report,
        show_progress=show_progress,
        bf16=bf16,
    )
    return student


def _layer_pairs(layers: Sequence[int], n_teacher: int) -> list[tuple[int, int]]:
    """(student hidden state, teacher hidden state) pairs to match. Student layer k stands for teacher
    layers layers[k] .. layers[k + 1] - 1: its output should be the teacher's hidden state after the last
    of them (hidden_states[0] is the embedding layer's output); layers out of order have no such spans,
    so only the last states are matched."""
    if list(layers) == sorted(layers):
        return [(k + 1, end) for k, end in enumerate([*layers[1:], n_teacher])]
    return [(len(layers), n_teacher)]


def _teacher_targets(teacher, student, texts, batches, pairs, layers, ffn_width, report: Reporter):
    """Per batch (features, the teacher's embedding, its token states for each layer pair in float16),
    and each pair's mean square state; with ``ffn_width``, the student's feed-forward layers narrowed on
    the teacher's activity meanwhile."""
    import torch

    teacher.eval()
    targets = []
    activity = _FfnActivity(teacher, layers) if ffn_width is not None else None
    try:
        with torch.no_grad():
            for batch in batches:
                features = teacher.preprocess([texts[i] for i in batch])
                if activity is not None:
                    activity.mask = features["attention_mask"]
                emb, states = _forward(teacher, features)
                targets.append((features, emb, [states[t].half() for _, t in pairs]))
    finally:  # the teacher is the caller's: leave no hook on it
        if activity is not None:
            activity.close()
    if activity is not None:
        narrow_ffn(student, [torch.topk(s, ffn_width).indices.sort().values for s in activity.scores()])
        report(f"feed-forward layers narrowed to {ffn_width} neurons")
    scales = [
        _mean_square([tgt[2][j] for tgt in targets], [tgt[0]["attention_mask"] for tgt in targets])
        for j in range(len(pairs))
    ]
    return targets, scales


class ShallowLoss:
    """One batch's loss and its parts, called by the training loop: the embedding, the token states of the
    layer pairs, the clauses read in context, and the teacher's head."""

    def __init__(self, student, targets, pairs, scales, hidden_weight: float):
        self.student, self.targets, self.pairs, self.scales = student, targets, pairs, scales
        self.hidden_weight = hidden_weight
        self.clause_targets: list = []
        self.clause_weight = 0.0
        self.head = None
        self.head_weight = 0.0

    def with_head(self, head, weight: float) -> None:
        from training.distil.loop import head_log_probs

        self.head, self.head_weight = head, weight
        self.head_targets = [head_log_probs(head, t[1]) for t in self.targets]

    def __call__(self, b: int):
        import torch

        from training.distil.loop import head_divergence

        features, target, target_states = self.targets[b]
        emb, states = _forward(self.student, features)
        loss = ((emb - target) ** 2).sum(dim=1).mean()
        parts = {"embedding loss": loss.detach().item(), "token states": 0.0}
        if self.pairs:
            mask = features["attention_mask"].unsqueeze(-1).to(emb.dtype)
            hidden = sum(
                (((states[s] - t.float()) ** 2) * mask).sum() / (mask.sum() * t.shape[-1]) / scale
                for (s, _), t, scale in zip(self.pairs, target_states, self.scales, strict=True)
            ) / len(self.pairs)
            parts["token states"] = hidden.detach().item()
            loss = loss + self.hidden_weight * hidden
        if self.clause_targets:
            parts["clauses in context"] = 0.0
            if self.clause_targets[b] is not None:
                rows, weights, target_clauses = self.clause_targets[b]
                pooled = torch.einsum("ct,cth->ch", weights, states[-1][rows])
                pooled = torch.nn.functional.normalize(pooled, dim=1)
                clauses = ((pooled - target_clauses) ** 2).sum(dim=1).mean()
                parts["clauses in context"] = clauses.detach().item()
                loss = loss + self.clause_weight * clauses
        if self.head is not None:
            kl = head_divergence(emb, self.head, self.head_targets[b])
            parts["teacher head"] = kl.detach().item()
            loss = loss + self.head_weight * kl
        return loss, parts


class _FfnActivity:
    """Per feed-forward neuron of the teacher's ``layers``: the summed absolute activation over real tokens,
    gathered by forward hooks while the teacher's targets are computed (``mask``: the batch's attention
    mask)."""

    def __init__(self, teacher, layers: Sequence[int]):
        blocks = teacher[0].auto_model.encoder.layer
        self.blocks = [blocks[i] for i in layers]
        if not all(
            hasattr(b, "intermediate") and hasattr(getattr(b, "output", None), "dense") for b in self.blocks
        ):
            raise ValueError("distil_ffn_width needs BERT-style encoder layers (intermediate, output.dense)")
        self.sums = [0.0 for _ in layers]
        self.mask = None
        self.hooks = [
            block.intermediate.register_forward_hook(self._hook(k)) for k, block in enumerate(self.blocks)
        ]

    def _hook(self, k: int):
        def record(module, inputs, output):
            mask = self.mask.unsqueeze(-1).to(output.dtype)
            self.sums[k] = self.sums[k] + (output.abs() * mask).sum(dim=(0, 1))

        return record

    def close(self) -> None:
        for hook in self.hooks:
            hook.remove()

    def scores(self):
        """Activity times the norm of each neuron's output weights: what dropping it would move."""
        return [
            s * block.output.dense.weight.norm(dim=0) for s, block in zip(self.sums, self.blocks, strict=True)
        ]


def narrow_ffn(body, keep) -> None:
    """Keep, in encoder layer k of a sentence-transformers body, the feed-forward neurons ``keep[k]`` (one
    index tensor per layer, all of one length: the config holds a single ``intermediate_size``)."""
    import torch

    auto = body[0].auto_model
    widths = {len(k) for k in keep}
    if len(keep) != len(auto.encoder.layer) or len(widths) != 1:
        raise ValueError("narrow_ffn needs one index set per encoder layer, all of one size")
    for block, idx in zip(auto.encoder.layer, keep, strict=True):
        up, down = block.intermediate.dense, block.output.dense
        kw = {"dtype": up.weight.dtype, "device": up.weight.device}
        new_up = torch.nn.Linear(up.in_features, len(idx), **kw)
        new_down = torch.nn.Linear(len(idx), down.out_features, **kw)
        with torch.no_grad():
            new_up.weight.copy_(up.weight[idx])
            new_up.bias.copy_(up.bias[idx])
            new_down.weight.copy_(down.weight[:, idx])
            new_down.bias.copy_(down.bias)
        block.intermediate.dense, block.output.dense = new_up, new_down
    auto.config.intermediate_size = widths.pop()


def check_ffn_width(width: int, available: int) -> None:
    """Raise ValueError unless ``width`` is a feed-forward width in 1..``available``."""
    if not 1 <= width <= available:
        raise ValueError(f"distil_ffn_width must be in 1..{available}, got {width}")


def _forward(body, features):
    """(sentence embedding, hidden states of every layer) of a sentence-transformers body whose first
    module is the transformer: its own pooling and normalisation modules make the embedding."""
    transformer = body[0]
    out = transformer.auto_model(
        **{k: features[k] for k in _MODEL_INPUTS if k in features},
        output_hidden_states=True,
        return_dict=True,
    )
    feats = {**features, "token_embeddings": out.last_hidden_state}
    for module in list(body)[1:]:
        feats = module(feats)
    return feats["sentence_embedding"], out.hidden_states


def _clause_targets(
    teacher, texts: Sequence[str], batches: Sequence[Sequence[int]], features: Sequence[dict]
):
    """Per batch, None or (the row of each clause, its token weights (clauses, tokens): 1/n on its n tokens,
    the teacher's normalised embedding of the clause read alone), for the messages that split into
    clauses (router.clauses)."""
    import numpy as np
    import torch

    from router.clauses import split_clauses
    from training.distil.loop import clause_rows

    split = {i: split_clauses(texts[i]) for batch in batches for i in batch}
    alone = sorted({c for clauses in split.values() for c in clauses})
    if not alone:
        return [None for _ in batches]
    with torch.no_grad():
        emb = teacher.encode(alone, batch_size=64, convert_to_tensor=True, show_progress_bar=False).float()
    emb = torch.nn.functional.normalize(emb, dim=1)
    index = {c: k for k, c in enumerate(alone)}
    out = []
    for batch, feats in zip(batches, features, strict=True):
        width = feats["input_ids"].shape[1]
        found = clause_rows(teacher, texts, batch, {r: split[i] for r, i in enumerate(batch)}, width)
        rows, weights, targets = (
            [r for r, _, _ in found],
            [w for _, w, _ in found],
            [index[c] for _, _, c in found],
        )
        out.append(
            (torch.tensor(rows), torch.from_numpy(np.stack(weights)), emb[torch.tensor(targets)])
            if rows
            else None
        )
    return out


def teacher_head(texts, batches, embeddings, labels: Mapping[str, str], head_params: Mapping):
    """(weight, bias), one row per label, of a logistic head fitted on the teacher's embeddings of the
    labeled texts."""
    import torch
    from sklearn.linear_model import LogisticRegression

    from training.fit.head import softmax_weights

    rows = [
        (emb[r], labels[texts[i]])
        for batch, emb in zip(batches, embeddings, strict=True)
        for r, i in enumerate(batch)
        if texts[i] in labels
    ]
    if len({y for _, y in rows}) < 2:
        raise ValueError("the teacher-head target needs labeled texts of at least two labels")
    x = torch.stack([e for e, _ in rows]).float().numpy()
    clf = LogisticRegression(**head_params).fit(x, [y for _, y in rows])
    coef, intercept = softmax_weights(clf)
    return torch.from_numpy(coef), torch.from_numpy(intercept)


def _mean_square(states, masks) -> float:
    """Mean squared value of the real tokens' states (the scale a layer's error is measured against)."""
    num = sum(float(((s.float() ** 2) * m.unsqueeze(-1)).sum()) for s, m in zip(states, masks, strict=True))
    den = sum(float(m.sum()) * s.shape[-1] for s, m in zip(states, masks, strict=True))
    return num / den if den else 1.0


def keep_layers(body, layers: Sequence[int]) -> None:
    """Cut a sentence-transformers body down to ``layers`` of its transformer encoder (in that order); the
    config's layer count follows, so the checkpoint saves and reloads as the smaller model."""
    auto = body[0].auto_model
    blocks = auto.encoder.layer
    check_layers(layers, len(blocks))
    import torch

    auto.encoder.layer = torch.nn.ModuleList([blocks[i] for i in layers])
    auto.config.num_hidden_layers = len(layers)


def check_layers(layers: Sequence[int], available: int) -> None:
    """Raise ValueError unless ``layers`` are distinct encoder layer indices below ``available``."""
    if not layers or any(not 0 <= i < available for i in layers) or len(set(layers)) != len(layers):
        raise ValueError(f"distil_layers must be distinct indices in 0..{available - 1}, got {list(layers)}")
