"""PNG plots of an evaluation report (matplotlib, Agg canvas; pyplot and its global state are not used)."""

from __future__ import annotations

from pathlib import Path

import numpy as np

PLOT_FILES = {
    "confusion_matrix": "confusion_matrix.png",
    "reliability": "reliability.png",
    "thresholds": "thresholds.png",
}
DPI = 110


def _figure(width: float, height: float):
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.figure import Figure

    fig = Figure(figsize=(width, height), dpi=DPI, layout="constrained")
    FigureCanvasAgg(fig)
    return fig


def _title(report: dict, what: str) -> str:
    m = report.get("model", {})
    return f"{what}: {m.get('name') or m.get('model_id', '')} ({m.get('backend', '')}{'/' + m['variant'] if m.get('variant') else ''})"


def plot_confusion_matrix(report: dict, path: str | Path) -> Path:
    cm = report["classification"]["confusion_matrix"]
    labels, matrix = cm["labels"], np.asarray(cm["matrix"], dtype=float)
    support = matrix.sum(axis=1, keepdims=True)
    share = np.divide(matrix, support, out=np.zeros_like(matrix), where=support > 0)
    k = len(labels)
    fig = _figure(1.2 * k + 2.5, 1.0 * k + 2.0)
    ax = fig.add_subplot()
    im = ax.imshow(share, cmap="Blues", vmin=0.0, vmax=1.0)
    ax.set_xticks(range(k), labels, rotation=30, ha="right")
    ax.set_yticks(range(k), labels)
    ax.set_xlabel("predicted")
    ax.set_ylabel("true")
    for i in range(k):
        for j in range(k):
            ax.text(
                j,
                i,
                f"{int(matrix[i, j])}",
                ha="center",
                va="center",
                color="white" if share[i, j] > 0.5 else "black",
                fontsize=9,
            )
    fig.colorbar(im, ax=ax, label="share of the true class")
    ax.set_title(_title(report, "Confusion matrix"), fontsize=10)
    fig.savefig(path)
    return Path(path)


def plot_reliability(report: dict, path: str | Path) -> Path:
    cal = report["calibration"]
    bins = cal["bins"]
    lower = np.array([b["lower"] for b in bins])
    upper = np.array([b["upper"] for b in bins])
    width = upper - lower
    used = [b["count"] > 0 for b in bins]
    acc = np.array([b["accuracy"] if b["count"] else 0.0 for b in bins])
    conf = np.array([b["confidence"] if b["count"] else 0.0 for b in bins])
    counts = np.array([b["count"] for b in bins])

    fig = _figure(6.0, 6.5)
    ax, hist = fig.subplots(2, 1, sharex=True, height_ratios=[3, 1])
    ax.plot([0, 1], [0, 1], "--", color="grey", lw=1, label="perfect calibration")
    ax.bar(
        lower,
        np.where(used, acc, 0),
        width=width,
        align="edge",
        edgecolor="black",
        color="#4C72B0",
        alpha=0.85,
        label="accuracy",
    )
    gap_bottom = np.minimum(acc, conf)
    ax.bar(
        lower,
        np.where(used, np.abs(conf - acc), 0),
        bottom=gap_bottom,
        width=width,
        align="edge",
        color="#DD8452",
        alpha=0.45,
        hatch="//",
        label="gap to confidence",
    )
    tau = report.get("threshold")
    if tau is not None:
        ax.axvline(tau, color="red", lw=1, ls=":", label=f"tau = {tau:g}")
    ax.set_xlim(0, 1)
    ax.set_ylim(0, 1)
    ax.set_ylabel("accuracy")
    ax.legend(loc="upper left", fontsize=8)
    ax.set_title(
        f"{_title(report, 'Reliability')}\nECE {cal['ece']:.4f}, NLL {cal['nll']:.4f}, Brier {cal['brier']:.4f}",
        fontsize=10,
    )
    hist.bar(lower, counts, width=width, align="edge", color="grey", edgecolor="black")
    hist.set_xlabel("confidence (top-1 probability)")
    hist.set_ylabel("messages")
    fig.savefig(path)
    return Path(path)


def plot_thresholds(report: dict, path: str | Path) -> Path:
    sweep = report["thresholds"]["sweep"]
    taus = [r["tau"] for r in sweep]

    def series(key):
        return [np.nan if r.get(key) is None else r[key] for r in sweep]

    fig = _figure(7.0, 4.5)
    ax = fig.add_subplot()
    ax.plot(taus, series("accepted_share"), "o-", label="accepted share")
    ax.plot(taus, series("accepted_accuracy"), "s-", label="accuracy of accepted")
    ax.plot(taus, series("to_verifier_share"), "^-", label="share to verifier")
    if any(r.get("oos_recall") is not None for r in sweep):
        ax.plot(taus, series("oos_recall"), "d--", label="out-of-scope recall")
    tau = report.get("threshold")
    if tau is not None:
        ax.axvline(tau, color="red", lw=1, ls=":", label=f"router tau = {tau:g}")
    ax.set_xlabel("threshold tau")
    ax.set_ylabel("share")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, loc="lower left")
    ax.set_title(_title(report, "Threshold sweep"), fontsize=10)
    fig.savefig(path)
    return Path(path)


def write_plots(report: dict, out_dir: str | Path) -> dict[str, Path]:
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    return {
        "confusion_matrix": plot_confusion_matrix(report, out_dir / PLOT_FILES["confusion_matrix"]),
        "reliability": plot_reliability(report, out_dir / PLOT_FILES["reliability"]),
        "thresholds": plot_thresholds(report, out_dir / PLOT_FILES["thresholds"]),
    }
