"""`solbench extract`: problems from HuggingFace model definitions (offline, no weights, no GPU)."""

from __future__ import annotations

import argparse
import os
import time
import warnings
from pathlib import Path

DTYPES = {"bf16": "bfloat16", "bfloat16": "bfloat16", "fp16": "float16", "float16": "float16",
          "fp32": "float32", "float32": "float32"}


def register(subparsers) -> argparse.ArgumentParser:
    parser = subparsers.add_parser(
        "extract", help="extract problems from HuggingFace model definitions",
        description="Trace a model's transformers definition on meta tensors (no weights, no GPU) and write "
                    "problems: definition.json + workload.jsonl per problem, plus the reference source.")
    add_arguments(parser)
    parser.set_defaults(func=handle)
    return parser


def add_arguments(parser: argparse.ArgumentParser) -> None:
    which = parser.add_mutually_exclusive_group()
    which.add_argument("--model", "-m", action="append", default=[], metavar="ID",
                       help="HuggingFace model id (repeatable), e.g. Qwen/Qwen3-8B, or a family: the start of known "
                            "ids up to a word boundary, e.g. Qwen/Qwen3 (every known Qwen3 size, dense and MoE)")
    which.add_argument("--all", action="store_true", help="every model solbench ships config facts for")
    which.add_argument("--list", action="store_true", help="list the models solbench knows offline and exit")
    parser.add_argument("--config", type=Path, help="a config.json to use instead of the cache/hub/shipped facts "
                                                    "(with --module: the constructor's arguments, a JSON object)")
    parser.add_argument("--module", metavar="PKG.MOD:CLASS",
                        help="extract any importable nn.Module (built on meta, captured generically); name it "
                             "with --model, give its arguments with --config/--config-kw and its call with --input")
    parser.add_argument("--config-kw", nargs="+", action="extend", default=[], metavar="KEY=VALUE",
                        help="--module: constructor arguments (values read as JSON when they parse)")
    parser.add_argument("--input", action="append", default=[], metavar="SPEC",
                        help="--module: one forward argument, NAME=DIM,DIM,...[:DTYPE]; DIM is a size (1024) or a "
                             "variable axis with its capture sizes (seq:64|96); DTYPE float32|bfloat16|float16|"
                             "int64[HIGH]|int32[HIGH]|bool (see docs/extract.md)")
    parser.add_argument("-o", "--output", type=Path, default=Path("."),
                        help="root of a checkout's layout: problems go to OUTPUT/problem_defs/hf/<name>/ and "
                             "reference sources to OUTPUT/reference_impls/hf/<name>.py (default: the working "
                             "directory); --check reads the same places")
    parser.add_argument("--references", type=Path,
                        help="reference root instead of OUTPUT/reference_impls; sources go to REFERENCES/hf/<name>.py")
    parser.add_argument("--dtype", default="bf16", choices=sorted(DTYPES), help="activation/weight dtype")
    parser.add_argument("--no-validate", action="store_true",
                        help="skip comparing each reference with its transformers module on CPU")
    parser.add_argument("--backward", action="store_true",
                        help="also the backward of each generic block of a kind that has one (from the joint graph, "
                             "validated against autograd through the module in float32)")
    parser.add_argument("--encoders", action="store_true",
                        help="also the encoders a model's token-id call never reaches: a VL model's vision tower, a "
                             "speech LM's audio encoder, each called with its own inputs (costly: validated at "
                             "the real image size or audio window)")
    parser.add_argument("--rope-inside", action="store_true",
                        help="also each attention and decoder layer with its RoPE table computed inside: positions "
                             "and inverse frequencies in, where the model hands it cos/sin (as a kernel that fuses "
                             "RoPE takes them)")
    parser.add_argument("--check", action="store_true",
                        help="verify the problems on disk are exactly what this code extracts (writes nothing)")
    parser.add_argument("--jobs", "-j", type=int, default=None, metavar="N",
                        help="processes at once: several models side by side (each holds one model's CPU "
                             "validation copies), or one model's blocks (as many workers as the memory available "
                             "holds); the output is the same for any N (default: the cores this command may use, "
                             "for several models also no more than the memory available holds at 8 GiB each)")


def handle(args: argparse.Namespace) -> int:
    from rich.console import Console

    from solbench.spec.errors import SpecError

    console = Console(stderr=True, soft_wrap=True)  # lines never broken at 80 columns in a log
    try:
        with warnings.catch_warnings():  # transformers' deprecation notes concern its callers' code, not ours
            warnings.simplefilter("ignore", FutureWarning)
            return _run(args, console)
    except SpecError as exc:
        console.print(f"[red]error:[/red] {exc}")
        return 2


def _run(args: argparse.Namespace, console) -> int:
    from solbench.extract import emit, hub, parallel, pipeline, reuse

    problems_root = args.output / emit.PROBLEMS_FOLDER  # -o DIR mirrors a checkout: DIR/problem_defs/hf, ...
    references_root = args.references if args.references is not None else args.output / emit.REFERENCES_FOLDER
    if args.list:
        _print_list(console)
        return 0
    started = time.perf_counter()
    if args.module:
        args.jobs = args.jobs if args.jobs is not None else parallel.default_jobs(1)
        return _run_module(args, console, started, problems_root, references_root)
    models = _selected_models(args.model, console) if args.model else []
    if args.config is not None and len(models) != 1:
        console.print("[red]error:[/red] --config needs exactly one --model (the id it belongs to)")
        return 2
    if args.check:  # no --model: the models the problems on disk came from (not every known model)
        known = set(pipeline.extractable_model_ids())
        models = models or [m for m in emit.models_on_disk(problems_root) if m in known]
        validate, use_hub = False, False
    elif args.all:
        models, validate, use_hub = pipeline.extractable_model_ids(), not args.no_validate, False
    elif models:
        validate, use_hub = not args.no_validate, True
    else:
        console.print("[red]error:[/red] name a model with --model ID, or use --all, --list or --check")
        return 2
    args.jobs = args.jobs if args.jobs is not None else parallel.default_jobs(len(models))
    os.environ.setdefault("HF_HUB_DISABLE_PROGRESS_BARS", "1")
    if use_hub and args.config is None:
        reach = hub.reach()
        if not reach.online:
            console.print(f"offline: using shipped configs where the local HuggingFace cache has none "
                          f"[dim]({reach.reason})[/dim]")
    finished: list = []  # filled as each model ends: an interrupt keeps (and writes) what finished
    interrupted = False
    with reuse.session():  # models with the same facts as an earlier one reuse its extraction
        try:
            failed = _extract_each(models, args, validate, use_hub, console, finished)
        except KeyboardInterrupt:
            if args.check:
                raise
            interrupted, failed = True, True
    results = [result for _, result in sorted(finished, key=lambda item: item[0])]
    problems = pipeline.collect(results)
    shared = {name: sorted(p.models) for name, p in problems.items() if len(p.models) > 1}
    if not (args.all or args.check):  # named models: say which problems they share
        for name, owners in shared.items():
            console.print(f"   [dim]shared[/dim] {name} [dim]({', '.join(owners)})[/dim]")
    summary = f"{len(problems)} problems" + (f", {len(shared)} shared by several models (each written once)"
                                             if shared else "")
    if args.check:
        drift = emit.check(problems, problems_root, references_root, complete=not args.model)
        for label, paths in (("missing", drift.missing), ("changed", drift.changed), ("not extracted", drift.extra)):
            for path in paths:
                console.print(f"[red]{label}[/red] {path}")
        if drift.clean:
            console.print(f"[green]ok[/green] {len(problems)} problems on disk match the extractor")
            return 0
        console.print("problems on disk differ from what this code extracts; run `solbench extract --all`")
        return 1
    written, skipped = _write(problems, problems_root, references_root, console)
    console.print(_written_line(summary, written, skipped, (problems_root, references_root), started))
    if interrupted:
        from solbench.cli import EXIT_INTERRUPTED

        console.print(f"interrupted: {len(results)} of {len(models)} model(s) had finished; their problems are "
                      f"written above, the others' are not")
        return EXIT_INTERRUPTED
    return 1 if failed or skipped else 0


def _run_module(args: argparse.Namespace, console, started: float, problems_root: Path,
                references_root: Path) -> int:
    """--module: one nn.Module built from the user's arguments, through the generic capture, written."""
    from solbench.extract import block_pool, pipeline, user_module
    from solbench.spec.errors import SpecError

    if args.all or args.check or len(args.model) > 1:
        raise SpecError("--module extracts one module: name it with at most one --model, without --all/--check")
    if args.encoders:
        raise SpecError("--encoders finds a hub model's vision or audio encoders; with --module, name the encoder "
                        "itself as the module and give its inputs with --input")
    config = user_module.read_config_file(args.config) if args.config is not None else {}
    config |= user_module.parse_config_kw(args.config_kw)
    built = user_module.build_user_module(args.module, config, args.input, args.model[0] if args.model else None)
    facts = {"module": args.module, "config": config, "inputs": list(args.input)}
    with console.status(f"{built.model_id}: starting") as status, block_pool.processes(args.jobs):
        result = pipeline.extract_built(built, facts, validate=not args.no_validate, dtype=DTYPES[args.dtype],
                                        backward=args.backward, rope_inside=args.rope_inside,
                                        progress=lambda step: status.update(f"{built.model_id}: {step}"))
    failed = _report(result, built.model_id, not args.no_validate, console)
    problems = pipeline.collect([result])
    written, skipped = _write(problems, problems_root, references_root, console)
    console.print(_written_line(f"{len(problems)} problems", written, skipped, (problems_root, references_root),
                                started))
    return 1 if failed or skipped else 0


def _extract_each(models: list[str], args: argparse.Namespace, validate: bool, use_hub: bool, console,
                  finished: list) -> bool:
    """Extract each model in turn, one line per model, each result added to `finished` (index, result) as it
    ends; a model that cannot be built is named with its reason and the others go on (alone, it is the
    command's error: exit 2). True when a model failed."""
    from solbench.extract import block_pool, pipeline
    from solbench.spec.errors import SpecError

    if args.jobs > 1 and len(models) > 1:
        return _extract_parallel(models, args, validate, use_hub, console, finished)
    failed = False
    for number, model_id in enumerate(models, 1):
        label = f"[{number}/{len(models)}] {model_id}" if len(models) > 1 else model_id
        with console.status(f"{label}: starting") as status, block_pool.processes(args.jobs):
            try:
                result = pipeline.extract_model(model_id, args.config, validate=validate, use_hub=use_hub,
                                                dtype=DTYPES[args.dtype], backward=args.backward,
                                                encoders=args.encoders, rope_inside=args.rope_inside,
                                                progress=lambda step, label=label: status.update(f"{label}: {step}"))
            except SpecError as exc:
                if len(models) == 1:
                    raise
                console.print(f"[red]x[/red] {label}: {exc}")
                failed = True
                continue
        finished.append((number, result))
        failed = _report(result, label, validate, console) or failed
    return failed


def _extract_parallel(models: list[str], args: argparse.Namespace, validate: bool, use_hub: bool, console,
                      finished: list) -> bool:
    """As `_extract_each`, `--jobs` models at a time; results kept in model order (identical output)."""
    from solbench.extract import parallel, pipeline, reuse

    def work(model_id: str):
        return pipeline.portable(pipeline.extract_model(model_id, args.config, validate=validate, use_hub=use_hub,
                                                        dtype=DTYPES[args.dtype], backward=args.backward,
                                                        encoders=args.encoders,
                                                        rope_inside=args.rope_inside))

    failed = False
    with console.status(f"{len(models)} models, {args.jobs} at a time") as status:
        def done(index: int, outcome) -> None:
            nonlocal failed
            label = f"[{index + 1}/{len(models)}] {outcome.model_id}"
            if outcome.error:
                console.print(f"[red]x[/red] {label}: {outcome.error}")
                failed = True
            else:
                finished.append((index, outcome.result))
                failed = _report(outcome.result, label, validate, console) or failed
            status.update(f"{len(models)} models, {args.jobs} at a time: {outcome.model_id} done")
        parallel.run_each(models, work, jobs=args.jobs, on_done=done, group=reuse.shipped_group,
                          slow=reuse.shipped_slow)
    return failed


def _report(result, label: str, validate: bool, console) -> bool:
    """One line for a model, then what it skipped and what did not match; True when something did not."""
    bad = result.failed
    mark = "[red]x[/red]" if bad else "[green]ok[/green]"
    checked = f", validated {len(result.validations) - len(bad)}/{len(result.validations)}" if validate else ""
    narrowed = " with narrowed MLP/expert widths" if any(v.reduced for v in result.validations) else ""
    console.print(f"{mark} {label}: {len(result.drafts)} problems from {result.layers} layers "
                  f"({result.layer_kinds} kinds){checked}{narrowed} in {result.seconds:.1f} s "
                  f"[dim](config: {result.config.source})[/dim]")
    for note in result.skipped:
        console.print(f"   [yellow]skipped[/yellow] {note}")
    if result.left_out:  # containers, primitives, what a template covers: one line, not one per module
        classes = [line.split(" (e.g. ", 1)[0] for line in result.left_out]
        shown = ", ".join(classes[:8]) + (f" and {len(classes) - 8} more" if len(classes) > 8 else "")
        console.print(f"   [dim]left out by design (containers, primitives inside emitted blocks, template-covered): {shown}[/dim]")
    for v in bad:
        console.print(f"   [red]mismatch[/red] {v.problem}: {v.message}")
    return bool(bad)


def _selected_models(names: list[str], console) -> list[str]:
    """The model ids behind the --model names, families expanded, each id once.

    A family's members that cannot be built (remote code, another framework) are named and left out; a
    single such model is kept, so that it fails with its reason."""
    from solbench.extract import configs  # off the start-up path of every other subcommand, as in _run

    models: list[str] = []
    for name in names:
        selection = configs.select(name)
        ids = list(selection.model_ids)
        if selection.family:
            console.print(f"{name}: a family of {len(ids)} known models [dim]({', '.join(ids)})[/dim]")
            for model_id in [m for m in ids if configs.unbuildable_reason(m)]:
                console.print(f"   [yellow]left out[/yellow] {model_id}: {configs.unbuildable_reason(model_id)}")
                ids.remove(model_id)
        models += [m for m in ids if m not in models]
    return models


def _print_list(console) -> None:
    """Every shipped model: family, kind and library, or why it cannot be extracted."""
    from solbench.extract import configs

    for model_id, entry in configs.shipped_models().items():
        what = entry.get("reason") or f"{entry.get('library', 'transformers')}, {entry['confidence']} facts"
        console.print(f"{model_id:50s} {entry['family']:16s} {entry['kind']:10s} {what}")
    console.print("[dim]--model with the start of known ids up to a word boundary (e.g. Qwen/Qwen3, "
                  "black-forest-labs/FLUX.1) extracts that family; models with a reason cannot be extracted[/dim]")


def _write(problems: dict, problems_root: Path, references_root: Path, console) -> tuple:
    """Write the problems; one that cannot be made is named on its own line and left out (the rest written)."""
    from solbench.extract import emit

    skipped: list[str] = []
    written = emit.write(problems, problems_root, references_root,
                         on_skip=lambda name, why: (skipped.append(name), console.print(
                             f"[red]not written[/red] {name}: {why}")))
    return written, skipped


def _written_line(summary: str, written, skipped: list[str], roots: tuple[Path, Path], started: float) -> str:
    """The last line, counted in problems: written (a file created or changed), unchanged, not written; and
    the two folders, named only when a problem's files are there (so that they exist)."""
    from solbench.extract import emit

    counts = f"{len(written.written)} written, {len(written.unchanged)} unchanged" + (
        f", {len(skipped)} not written" if skipped else "")
    where = f" in {roots[0] / emit.SUBDIR} and {roots[1] / emit.SUBDIR}" if written.paths else ""
    return f"{summary}: {counts}{where} ({time.perf_counter() - started:.1f} s)"
