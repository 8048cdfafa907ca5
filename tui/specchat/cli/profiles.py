"""``specchat profiles …``: list, show, check, edit and find drafts for speculation profiles."""

from __future__ import annotations

import argparse
import os
from typing import TYPE_CHECKING

import tomlkit
from tomlkit.exceptions import ParseError

from ..engine.compat import check_pair
from ..errors import ConfigError, ModelError
from ..figures import DASH
from ..profiles import (
    SCHEMA,
    Profile,
    available_profiles,
    bundled_dir,
    load_profile,
    model_base,
    models,
    parse_profile,
    user_dir,
)
from ..profiles.drafts import draft_candidates
from ..profiles.fit import DEFAULT_MARGIN_GB, GB

if TYPE_CHECKING:
    from ..profiles.plan import MemoryPlan


def add_parser(sub: argparse._SubParsersAction) -> None:
    parser = sub.add_parser("profiles", help="list, show, check and edit speculation profiles")
    verbs = parser.add_subparsers(dest="verb", required=True)
    verbs.add_parser("list", help="every profile, bundled and your own")
    show = verbs.add_parser("show", help="a profile's effective settings and where its models are")
    show.add_argument("name")
    check = verbs.add_parser("check", help="draft compatibility and memory fit, without loading weights")
    check.add_argument("name")
    check.add_argument("--vram-gb", type=float, default=None,
                       help="GPU memory to fit in (default: what NVML says is free; the seeds' 12 GB without a GPU)")
    check.add_argument("--ram-gb", type=float, default=None, help="system memory (default: this machine's)")
    check.add_argument("--margin-gb", type=float, default=DEFAULT_MARGIN_GB, help="runtime margin (default 2)")
    setter = verbs.add_parser("set", help="change one key, keeping the file's comments")
    setter.add_argument("name")
    setter.add_argument("key", help="section.key, e.g. draft.n_max")
    setter.add_argument("value", help='a TOML value: 3, 0.5, "auto", true, or a bare word')
    drafts = verbs.add_parser("drafts", help="GGUFs that could draft for the profile's target, compatible first")
    drafts.add_argument("name")
    verbs.add_parser("templates", help="the chat formats llama.cpp knows by name, for [chat] template")


def run(args: argparse.Namespace) -> int:
    return {"list": cmd_list, "show": cmd_show, "check": cmd_check, "set": cmd_set, "drafts": cmd_drafts,
            "templates": cmd_templates}[args.verb](args)


def _gb(value: float | None) -> str:
    return "?" if value is None else f"{value / GB:.2f} GB"


def _table(rows: list[list[str]]) -> str:
    widths = [max(len(row[i]) for row in rows) for i in range(len(rows[0]))]
    return "\n".join("  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip() for row in rows)


# -- list / show ------------------------------------------------------------------------------------------------------


def cmd_list(_args: argparse.Namespace) -> int:
    bundled = {p.stem for p in bundled_dir().glob("*.toml")}
    rows = [["name", "source", "method", "n_max", "target", "draft", "about"]]
    for name, path in available_profiles().items():
        source = "bundled" if path.parent == bundled_dir() else ("user (overrides bundled)" if name in bundled else "user")
        try:
            p = load_profile(str(path))
        except ConfigError as exc:
            rows.append([name, source, DASH, DASH, DASH, DASH, f"INVALID: {exc}"])
            continue
        rows.append([name, source, p.method, str(p.n_max) if p.method != "none" else DASH,
                     p.model("target"), p.model("draft") or DASH, p.description])
    print(_table(rows))
    return 0


def _located(reference: str | None, profile: Profile) -> models.Located | None:
    return None if reference is None else models.locate(reference, model_base(profile))


def cmd_show(args: argparse.Namespace) -> int:
    profile = load_profile(args.name)
    print(f"profile {profile.name}: {profile.path}")
    if profile.description:
        print(f"  {profile.description}")
    for section, keys in SCHEMA.items():  # every key, as the schema lists them
        print(f"[{section}]")
        explicit = (profile.document or {}).get(section, {})
        for key in keys:
            value = profile.values[section][key]
            if value is None and key not in explicit:
                continue
            origin = "" if key in explicit else "   # default"
            print(f"{key} = {tomlkit.item(value).as_string()}{origin}")
    for role, section in (("target", "target"), ("draft", "draft")):
        located = _located(profile.model(section), profile)
        if located is not None:
            where = str(located.path) if located.path else f"NOT FOUND — {located.missing_message(role)}"
            print(f"{role} model: {where}")
    return 0


# -- check ------------------------------------------------------------------------------------------------------------


def cmd_check(args: argparse.Namespace) -> int:
    from ..profiles.plan import plan

    profile = load_profile(args.name)
    memory = plan(profile, args.vram_gb, args.ram_gb, args.margin_gb)
    for m in memory.models:
        if m.located.path is None:
            print(f"! {m.located.missing_message(m.role)}")
    print(f"profile {profile.name}: method {profile.method}, n_ctx {profile.n_ctx}")
    compatible = _print_compatibility(profile, memory.models)
    fits = _print_memory_fit(profile, memory)
    return 0 if compatible and fits else 1


def _print_compatibility(profile: Profile, pair: list) -> bool:
    """Section 1: whether the draft can speculate for the target; False when it cannot."""
    method = profile.method
    print("\n1. Draft compatibility (llama.cpp's rule, read by llama.cpp without loading weights)")
    if method == "mtp":
        drafter = _mtp_drafter(profile, pair)
        print("   " + drafter)
        return not drafter.startswith("✗")
    if not profile.uses_draft_model:
        print(f"   not applicable: method {method} uses no separate draft model")
    elif len(pair) == 2 and all(m.located.path for m in pair):
        problems = check_pair(pair[0].located.path, pair[1].located.path)
        for problem in problems:
            print(f"   ✗ {problem}")
        if problems:
            return False
        print("   ✓ compatible: same vocabulary type, BOS/EOS, vocabulary size within 128, identical tokens from id 5 on")
    else:
        print("   ? cannot check: a model file is absent")
    return True


def _print_memory_fit(profile: Profile, memory: MemoryPlan) -> bool:
    """Section 2: the memory plan, its verdicts and what to change; False when the pair does not fit."""
    report = memory.report
    print(f"\n2. Memory fit ({memory.vram_source}; {report.ram / GB:.0f} GB RAM; KV cache {profile.kv_cache})")
    if memory.build is not None:
        print(f"   build: {memory.build.described}")
    if memory.build_note:
        print(f"   ! {memory.build_note}")
    rows = [["model", "role", "weights", f"KV @ {profile.n_ctx}", "on GPU", "note"]]
    for m in report.models:
        rows.append([m.name, m.role, _gb(m.weights), _gb(m.kv), f"{m.share:.0%}", m.note])
    rows.append(["runtime margin", "", _gb(report.margin), "", "", "CUDA context, compute buffers, headroom"])
    if report.uses_gpu:
        rows.append(["needed on GPU", "", _gb(report.on_gpu + report.margin), "", "", ""])
        rows.append(["VRAM left", "", _gb(report.vram_left), "", "", ""])
    else:
        why = "CPU-only build" if memory.build_note else "CPU only: n_gpu_layers = 0"
        rows.append(["needed in RAM", "", _gb(report.on_cpu + report.margin), "", "", why])
    print("   " + _table(rows).replace("\n", "\n   "))
    fits = True
    for verdict in report.verdicts():
        print(f"   → {verdict}")
        fits &= not verdict.startswith(("does not fit", "RISK"))
    if memory.offloaded is not None:  # the plan once the build is fixed: the layers asked for on this GPU
        for verdict in memory.offloaded.verdicts():
            if "VRAM" in verdict:
                print(f"   → with a GPU build: {verdict}")
    for change in memory.changes:
        print(f"     · {change}")
    return fits


def _mtp_drafter(profile: Profile, pair: list) -> str:
    """What drafts for an MTP profile: the target's own heads, or its assistant GGUF (named, or found beside it)."""
    from ..profiles.assistant import has_mtp_heads, no_drafter

    target = pair[0] if pair and pair[0].role == "target" else None
    if target is None or target.meta is None:
        return "? cannot check: the target file is absent"
    if has_mtp_heads(target.meta):
        return "✓ MTP heads inside the target draft (llama-server --spec-type draft-mtp)"
    assistant = next((m for m in pair if m.role == "draft" and m.located.path), None)
    if assistant is not None:
        return f"✓ the assistant {assistant.located.path} drafts (llama-server --spec-type draft-mtp -md)"
    return f"✗ {no_drafter(target.located.path, target.meta)}"


# -- set ------------------------------------------------------------------------------------------------------------------


def _parse_value(raw: str) -> object:
    try:
        return tomlkit.parse(f"v = {raw}")["v"]
    except ParseError:
        return raw  # a bare word such as a model file name


def cmd_set(args: argparse.Namespace) -> int:
    profile = load_profile(args.name)
    section, _, key = args.key.partition(".")
    if section not in SCHEMA or key not in SCHEMA[section]:
        raise ConfigError(f"unknown key {args.key!r} — keys are section.key, e.g. draft.n_max, sampling.temperature")
    assert profile.path is not None
    document = tomlkit.parse(profile.path.read_text(encoding="utf-8"))
    if section not in document:
        document.add(section, tomlkit.table())
    document[section][key] = _parse_value(args.value)
    text = tomlkit.dumps(document)
    # Edits to a bundled preset go to a user copy with the same name, which then overrides it.
    destination = profile.path if not profile.bundled else user_dir() / profile.path.name
    parse_profile(text, destination, profile.name)  # refuse to write an invalid profile
    destination.parent.mkdir(parents=True, exist_ok=True)
    tmp = destination.with_name(f".{destination.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, destination)
    print(f"{profile.name}: {args.key} = {tomlkit.item(document[section][key]).as_string()}  ({destination})")
    return 0


# -- drafts ---------------------------------------------------------------------------------------------------------------


def cmd_drafts(args: argparse.Namespace) -> int:
    profile = load_profile(args.name)
    located = _located(profile.model("target"), profile)
    if located is None or located.path is None:
        raise ModelError(located.missing_message("target") if located else "the profile names no target")
    from ..profiles import embedded

    pool = models.discover() + [embedded.draft_path()]
    candidates = draft_candidates(located.path, pool)
    print(f"drafts for {located.path.name} ({_gb(located.path.stat().st_size)}), from {len(pool)} GGUFs found:")
    if not candidates:
        print("  none smaller than the target — put GGUFs in one of: " + ", ".join(map(str, models.model_dirs())))
    for c in candidates:
        mark = "✓" if c.compatible else "✗"
        why = "" if c.compatible else f" — {c.problems[0]}"
        print(f"  {mark} {c.path.name:48} {_gb(c.size):>9}  {c.path.parent}{why}")
    return 0


def cmd_templates(_args: argparse.Namespace) -> int:
    from ..engine.chat_template import builtin_names

    print("[chat] template takes a Jinja file (relative to the profile's folder) or one of llama.cpp's names:")
    print("  " + ", ".join(builtin_names()))
    return 0
