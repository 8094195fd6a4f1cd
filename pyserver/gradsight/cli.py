"""The command line: ``gradsight demo | trace | diagnose | validate | serve``."""

from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

USAGE_TRACE = """gradsight trace SCRIPT [ARGS...] [--output run.db [--overwrite]] [--trigger NAME[,NAME]] [--break EXPR]...
                       [--every N] [--capture-window K] [--capture-bytes B] [--max-steps K] [--quiet]
       gradsight trace -m MODULE [ARGS...] [options]

gradsight's options may come before or after SCRIPT; everything after `--` goes to the script.
Triggers: loss_spike, grad_explode, nan_inf, vanishing, dead_units (default: all), none, or a condition
such as "layer('fc1').grad_norm > 50". --break EXPR pauses under a debugger, or ends the run
(exit status 3, snapshot written) without one. An existing run store at --output is kept and the
run gets the next free name (run-1.db) unless --overwrite; any other existing file is refused.
--max-steps K ends the run after K optimizer steps (exit status 0), as `gradsight validate` re-runs do."""

_VALUE_OPTIONS = {"-o": "output", "--output": "output", "--trigger": "trigger", "--break": "break",
                  "--every": "every", "--capture-window": "capture_window", "--capture-bytes": "capture_bytes",
                  "--max-steps": "max_steps"}
_FLAG_OPTIONS = {"--quiet": "quiet", "-q": "quiet", "--overwrite": "overwrite"}


class UsageError(Exception):
    pass


def split_trace_args(argv: list[str]) -> tuple[dict[str, list[str]], bool, str, list[str]]:
    """(gradsight options, is_module, target, script args) from ``trace``'s argv."""
    opts: dict[str, list[str]] = {}
    target: str | None = None
    module = False
    script_args: list[str] = []
    i = 0
    while i < len(argv):
        arg = argv[i]
        if arg == "--":
            rest = argv[i + 1:]
            if target is None:
                if not rest:
                    raise UsageError("no script given after --")
                target, rest = rest[0], rest[1:]
            script_args.extend(rest)
            break
        name, eq, inline = arg.partition("=")
        if name in _VALUE_OPTIONS:
            if eq:
                value = inline
            else:
                if i + 1 >= len(argv):
                    raise UsageError(f"{name} needs a value")
                i += 1
                value = argv[i]
            opts.setdefault(_VALUE_OPTIONS[name], []).append(value)
        elif arg in _FLAG_OPTIONS:
            opts.setdefault(_FLAG_OPTIONS[arg], []).append("1")
        elif arg == "-m" and target is None:
            if i + 1 >= len(argv):
                raise UsageError("-m needs a module name")
            module, target = True, argv[i + 1]
            i += 1
        elif target is None:
            if arg.startswith("-"):
                raise UsageError(f"unknown option {arg!r} before the script")
            target = arg
        else:
            script_args.append(arg)
        i += 1
    if target is None:
        raise UsageError("no script given")
    return opts, module, target, script_args


def _int_option(opts: dict[str, list[str]], key: str, default: int, minimum: int) -> int:
    values = opts.get(key)
    if not values:
        return default
    raw = values[-1]
    try:
        value = int(raw)
    except ValueError:
        raise UsageError(f"--{key.replace('_', '-')} must be a whole number, got {raw!r}") from None
    if value < minimum:
        raise UsageError(f"--{key.replace('_', '-')} must be at least {minimum}, got {value}")
    return value


def default_store(target: str) -> str:
    stem = Path(target).stem if not target.startswith("-") else target
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return os.path.join(".gradsight", "runs", f"{stem.replace('.', '_')}-{stamp}.db")


def cmd_trace(argv: list[str]) -> int:
    if not argv or argv[0] in ("-h", "--help"):
        print(USAGE_TRACE)
        return 0 if argv else 2
    from .conditions import ConditionError, parse
    from .thresholds import ThresholdError, load

    try:
        opts, module, target, script_args = split_trace_args(argv)
        from .runtime.session import DEFAULT_CAPTURE_BYTES, DEFAULT_CAPTURE_WINDOW, DEFAULT_EVERY, Settings
        from .runtime.trace import run
        from .runtime.triggers import BUILTIN, parse_trigger_list

        names, conds = parse_trigger_list(opts.get("trigger", list(BUILTIN)))
        breaks = tuple(parse(b) for b in opts.get("break", []))
        settings = Settings(
            triggers=tuple(names), conditions=tuple(conds), breaks=breaks,
            every=_int_option(opts, "every", DEFAULT_EVERY, 1),
            capture_window=_int_option(opts, "capture_window", DEFAULT_CAPTURE_WINDOW, 0),
            capture_bytes=_int_option(opts, "capture_bytes", DEFAULT_CAPTURE_BYTES, 0),
            thresholds=load(os.getcwd()),
            max_steps=_int_option(opts, "max_steps", 0, 1) if opts.get("max_steps") else None,
        )
    except UsageError as exc:
        print(f"gradsight trace: {exc}\n\n{USAGE_TRACE}", file=sys.stderr)
        return 2
    except ConditionError as exc:
        print(f"gradsight trace: bad condition\n{exc}", file=sys.stderr)
        return 2
    except (ValueError, ThresholdError) as exc:
        print(f"gradsight trace: {exc}", file=sys.stderr)
        return 2
    store = opts.get("output", [default_store(target)])[-1]
    return run(target, script_args, module=module, store=store, settings=settings, quiet=bool(opts.get("quiet")),
               overwrite=bool(opts.get("overwrite")))


def cmd_diagnose(args: argparse.Namespace) -> int:
    import json

    from .analysis.data import load
    from .analysis.diagnose import analyse_run, build
    from .analysis.ranks import diagnose_ranks, siblings
    from .analysis.summary import text
    from .fixes import attach
    from .store import StoreError, check_replaceable
    from .thresholds import ThresholdError
    from .thresholds import load as load_thresholds

    report = args.report
    try:
        if report and not report.lower().endswith((".pdf", ".html", ".htm")):
            print(f"gradsight diagnose: --report must end in .html or .pdf, got {report!r}", file=sys.stderr)
            return 2
        if report:
            check_replaceable(report, "--report")
        thresholds = load_thresholds(os.getcwd())
        ranks = siblings(args.store)
        if len(ranks) > 1:  # a torchrun run: every rank's store, read together
            diagnosis = diagnose_ranks(ranks, thresholds)
            lead = (diagnosis.get("root_cause") or {}).get("rank", ranks[0][0])
            data = load(dict(ranks).get(lead, args.store))
            findings, cause = analyse_run(data, thresholds)
        else:
            data = load(args.store)
            findings, cause = analyse_run(data, thresholds)
            diagnosis = build(data, findings, cause)
        attach(diagnosis, data, findings, cause)
    except (StoreError, ThresholdError) as exc:
        print(f"gradsight diagnose: {exc}", file=sys.stderr)
        return 2
    except Exception as exc:  # a store that reads but holds values no run writes: say so, no traceback
        print(f"gradsight diagnose: {args.store}: could not be analysed ({type(exc).__name__}: {exc}); "
              "the store may be damaged or written by another tool", file=sys.stderr)
        return 2
    if report:
        from .viz.report import html_report, pdf_report

        try:
            if report.lower().endswith(".pdf"):
                pdf_report(data, diagnosis, report)
            else:
                Path(report).write_text(html_report(data, diagnosis), encoding="utf-8")
        except OSError as exc:
            print(f"gradsight diagnose: cannot write {report} ({exc.strerror or exc})", file=sys.stderr)
            return 2
    if args.json:
        print(json.dumps(diagnosis, indent=2, default=str))
    else:
        print(text(diagnosis))
        if report:
            print(f"report: {report}")
    return 0


def cmd_demo(args: argparse.Namespace) -> int:
    from .demo.run import run_demo

    return run_demo(Path(args.out))


def main(argv: list[str] | None = None) -> int:
    try:
        return _main(argv)
    except BrokenPipeError:  # the reader went away (gradsight diagnose run.db | head): no traceback
        try:
            sys.stdout = open(os.devnull, "w")  # noqa: SIM115 (Python flushes stdout at exit)
        except OSError:
            pass
        return 1


def _main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if argv and argv[0] == "trace":
        return cmd_trace(argv[1:])
    if argv and argv[0] == "validate":
        from .fixes.validate import main as validate_main

        return validate_main(argv[1:])
    parser = argparse.ArgumentParser(prog="gradsight", description="Debug PyTorch training: catch, trace and explain anomalies.")
    parser.add_argument("--version", action="version", version=f"gradsight {__import__('gradsight').__version__}")
    sub = parser.add_subparsers(dest="command", metavar="{demo,trace,diagnose,validate,serve}")
    demo = sub.add_parser("demo", help="train a small transformer with a real fault, catch and explain it")
    demo.add_argument("--out", default="gradsight-demo", help="folder for snapshot.db and the reports (default: ./gradsight-demo)")
    sub.add_parser("trace", help="run an unchanged training script instrumented (see `gradsight trace --help`)")
    sub.add_parser("validate", help="re-run the script with each candidate fix and say whether it removed the fault (see `gradsight validate --help`)")
    diag = sub.add_parser("diagnose", help="health, anomaly, root cause and fixes of a run store")
    diag.add_argument("store", help="a run store written by gradsight trace / watch")
    diag.add_argument("--json", action="store_true", help="print the gradsight.diagnosis/1 JSON object")
    diag.add_argument("--report", metavar="FILE", help="also write an HTML (.html) or PDF (.pdf) report")
    serve = sub.add_parser("serve", help="the language server (LSP over stdio) for editors")
    serve.add_argument("--stdio", action="store_true", help="talk LSP over stdin/stdout (the only transport; accepted for editors that pass it)")
    serve.add_argument("--store", help="follow this run store (default: the newest in the runs folder)")
    serve.add_argument("--runs-folder", help="where runs are found, relative to the workspace (default: .gradsight/runs)")
    serve.add_argument("--log", metavar="FILE", help="write the server's log to FILE")
    args = parser.parse_args(argv)
    if args.command == "serve":
        from .server import serve as run_server

        run_server(args.store, args.runs_folder, args.log)
        return 0
    if args.command == "demo":
        return cmd_demo(args)
    if args.command == "diagnose":
        return cmd_diagnose(args)
    parser.print_help()
    return 2


if __name__ == "__main__":
    sys.exit(main())
