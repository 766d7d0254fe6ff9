"""``layersearch steer train | eval | shrink``: SD²'s steering for the layer-skip self-drafter or an
independent draft model (see :mod:`layersearch.steer`), a layer-pruned drafter cut from the
verifier (``generate --steering`` / ``--draft-model`` are wired in :mod:`layersearch.decoder.build`)."""

from __future__ import annotations

from typing import Any

from layersearch.commands.args import model_args
from layersearch.runtime import MAX_DRAFT
from layersearch.commands.common import load, positive_int
from layersearch.commands.renamed import renamed_option


def add_parser(sub, parser_class) -> None:
    """Register ``steer`` and its actions on the main CLI's subparsers."""
    p = sub.add_parser("steer", help="SD²: steer the drafter with a vector from the verifier's hidden states")
    actions = p.add_subparsers(dest="action", required=True, parser_class=parser_class)
    train = actions.add_parser("train", help="train W_hml / W_s on verifier samples of a domain's train split")
    model_args(train, threads=1)
    which = train.add_mutually_exclusive_group()
    which.add_argument("--mask", help="mask JSON file: steer the layer-skip self-drafter with this mask")
    which.add_argument("--skip-ratio", type=float, help="self-drafter with an evenly spread mask (default 0.25)")
    which.add_argument("--drafter", help="an independent draft model (embedded name, HF id or directory) sharing the tokenizer")
    train.add_argument("--domain", required=True)
    train.add_argument("--prompts", type=int, default=16, help="training prompts (default 16)")
    train.add_argument("--val-prompts", type=int, default=2, help="validation prompts for the held-out KL (default 2; 0: none)")
    train.add_argument("--new-tokens", type=int, default=32, help="tokens the verifier samples per prompt (default 32)")
    train.add_argument("--max-prompt-tokens", type=int, default=192, help="keep the last N prompt tokens (default 192)")
    train.add_argument("--steps", type=int, default=120, help="AdamW steps, one sample each (default 120)")
    train.add_argument("--lr", type=float, default=1e-4, help="AdamW learning rate (default 1e-4)")
    train.add_argument("--max-offset", type=int, default=8, help="k: delta is uniform in [1, k] (default 8)")
    train.add_argument("--seed", type=int, default=0)
    train.add_argument("--finetune-drafter", metavar="OUT_DIR",
                       help="with --drafter: fine-tune the draft model too (all but its embeddings / LM head) and save "
                       "it as a model directory here; the steering file then names OUT_DIR as its drafter")
    train.add_argument("--drafter-lr", type=float, default=None,
                       help="AdamW learning rate of the drafter's weights with --finetune-drafter (default 5e-5)")
    train.add_argument("--out", required=True, help="steering file (.safetensors)")
    train.add_argument("--quiet", action="store_true", help="no progress bar")
    ev = actions.add_parser("eval", help="steered vs unsteered block efficiency on the test split")
    model_args(ev, threads=1)
    ev.add_argument("--steering", required=True, help="steering file from `steer train`")
    ev.add_argument("--drafter", help="the draft model the file was trained for (default: the name in the file)")
    ev.add_argument("--domain", required=True)
    ev.add_argument("--prompts", type=int, default=4, help="test prompts (default 4)")
    ev.add_argument("--max-new-tokens", type=int, default=48)
    ev.add_argument("--max-prompt-tokens", type=int, default=192, help="keep the last N prompt tokens (default 192)")
    ev.add_argument("--max-draft", type=int, default=MAX_DRAFT, help=f"static draft length (default {MAX_DRAFT})")
    renamed_option(ev, "--draft-length", "--max-draft {value}", metavar="N")
    ev.add_argument("--seeds", type=int, default=3, help="sampling seeds at T=1 (default 3)")
    ev.add_argument("--seed", type=int, default=0, help="prompt selection seed")
    ev.add_argument("--out", help="write the full report as JSON")
    ev.add_argument("--quiet", action="store_true", help="no progress bar")
    shrink = actions.add_parser("shrink", help="an independent drafter: the model with N evenly spread layers kept")
    model_args(shrink, threads=1)
    shrink.add_argument("--keep-layers", type=int, required=True,
                        help="decoder layers to keep, evenly spread, the first and the last included")
    shrink.add_argument("--out", required=True, help="new model directory (missing or empty)")
    p.set_defaults(command="steer")


def run(args: Any) -> int:
    """Check the counts (:mod:`layersearch.commands.steer_options`), then run the action (:mod:`layersearch.experiments.steer.workflow`)."""
    from layersearch.commands import steer_options as options

    from layersearch.experiments.steer import workflow
    options.check_counts(args)
    if args.action == "shrink":
        if args.threads is not None:
            positive_int(args.threads, "--threads")
        print(workflow.shrink_drafter(lambda: load(args), args.keep_layers, args.out), flush=True)
        return 0
    workflow.check_domain(args.domain)  # a bad prompt file fails before the model loads
    if args.action == "eval":
        return _eval(args, workflow)
    for line in workflow.train_steering(options.train_job(args), lambda: load(args)):
        print(line, flush=True)
    return 0


def _eval(args: Any, workflow: Any) -> int:
    from layersearch.common.outputs import check_output

    if args.out:
        check_output(args.out, "--out")
    job = workflow.EvalJob(args.steering, args.domain, args.prompts, args.max_new_tokens, args.max_prompt_tokens,
                           args.max_draft, args.seeds, args.seed, args.drafter, args.device, args.dtype, args.quiet)
    report = workflow.evaluate_steering(job, lambda: load(args))
    if args.out:
        from layersearch.common.jsonfile import write_json_atomic

        write_json_atomic(args.out, report)
    print(workflow.format_eval_report(report), flush=True)
    return 0
