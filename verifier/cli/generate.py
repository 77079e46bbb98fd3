"""`hero generate`: watermarked continuation of a prompt, as JSON {text, payload, key_version}."""

from __future__ import annotations

import argparse
import sys

from verifier.cli.common import add_profile_arg, cli_actor, cli_settings, emit, open_store, resolve_profile


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser("generate", help="generate watermarked text with a local model")
    p.add_argument("--prompt", required=True)
    p.add_argument("--field", action="append", default=[], metavar="NAME=VALUE", help="payload field (repeat)")
    p.add_argument("--max-new-tokens", type=int, default=200)
    p.add_argument(
        "--min-new-tokens", type=int, default=0, help="no end-of-text before this many tokens (longer = surer decode)"
    )
    p.add_argument("--model", default="smollm2")
    p.add_argument("--temperature", type=float, default=1.0)
    p.add_argument("--top-k", type=int, default=None)
    p.add_argument("--top-p", type=float, default=None)
    p.add_argument("--opening-nats", type=float, default=None,
                   help="draw the opening fresh until its tokens' surprisal reaches this many nats (default 8; 0: "
                        "only the first h tokens, spec v2's rule): identical requests then differ as plain "
                        "sampling does")
    add_profile_arg(p)
    p.set_defaults(handler=cmd_generate)


def cmd_generate(args: argparse.Namespace) -> None:
    from verifier.engine.payload import encode_payload, parse_field_args

    profile = resolve_profile(args.profile)
    payload = parse_field_args(profile, args.field)
    encode_payload(profile, payload)  # validate before the slow model load
    if not args.prompt.strip():
        raise ValueError("--prompt is empty")
    if not 1 <= args.max_new_tokens <= 4096:
        raise ValueError("--max-new-tokens must be in 1..4096")
    if not 0 <= args.min_new_tokens <= args.max_new_tokens:
        raise ValueError("--min-new-tokens must be in 0..--max-new-tokens")
    if args.opening_nats is not None and not 0 <= args.opening_nats <= 100:
        raise ValueError("--opening-nats must be in 0..100")
    store = open_store(cli_settings(args))
    keyset = store.active_keyset(profile)
    from tqdm import tqdm

    from verifier.engine.generation import generate_watermarked
    from verifier.lm import cache_dir, load_model, model_names

    if args.model not in model_names():
        raise ValueError(f"unknown model {args.model!r}; choose one of {model_names()}")
    if not (cache_dir(args.model) / "config.json").is_file():
        print(f"hero: first use of {args.model!r}: converting its GGUF weights to a float32 model under "
              f"{cache_dir(args.model)} (30-100 s). This happens once; later runs load the converted copy in "
              "seconds.", file=sys.stderr)
    print(f"hero: loading {args.model!r}...", file=sys.stderr)
    model, tokenizer = load_model(args.model)
    bar = tqdm(total=args.max_new_tokens, desc="generating", unit="tok", file=sys.stderr, leave=False,
               disable=None)  # disable=None: no bar when stderr is not a terminal
    with bar:
        (gen,) = generate_watermarked(
            model, tokenizer, [args.prompt], [payload], profile, keyset,
            max_new_tokens=args.max_new_tokens, min_new_tokens=args.min_new_tokens, temperature=args.temperature,
            top_k=args.top_k, top_p=args.top_p, on_step=lambda: bar.update(1), opening_nats=args.opening_nats,
        )
    out = {"text": gen.text, "payload": payload, "key_version": keyset.tables[0].version,
           "key_versions": {str(t.level): t.version for t in keyset.tables}}
    _audit_generation(store, out)
    emit(out)


def _audit_generation(store, out: dict) -> None:
    """A local generation uses every level's key, the private ones included, to mark a text with any payload:
    text that will decode as "user 1234" is exactly what attribution rests on. So it is on the record like a
    decode: the payload claimed, the versions used and the text's digest, committed before the text is printed
    (no record, no text)."""
    from verifier.audit.service import AuditEvent, record, text_digest

    actor = cli_actor()
    payload = " ".join(f"{k}={v}" for k, v in sorted(out["payload"].items()))
    versions = ",".join(out["key_versions"].values())
    levels = [int(lv) for lv in out["key_versions"]]
    record(store.db, [AuditEvent("generate", actor.subject, actor.role, actor.jti, levels, versions,
                                 text_digest(out["text"]), "generated", f"payload {payload}")])
