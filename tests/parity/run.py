#!/usr/bin/env python3
"""The parity harness's driver (scripts/parity.sh sets it up and calls it). Each concern's
scenarios and comparison live in compare/ (one module per concern), beside the release-side
script that runs the release's own code; this file runs the parts, releases side by side.

For every release pinned in tests/parity/wheels/ it runs that release's own classification
(classify.py, one fresh interpreter per release) on every fixture config and compares it with
`kvpilot layout --config F --sglang-version X`; it also checks that
src/layout/served_architectures.tsv is what the releases' model code says; runs each release's
resolve_decode_retraction_backup (retraction.py) on a scenario matrix and compares its choice
with `kvpilot check --sglang-version X --output json` (effective.retractionBackup, and
effective.hostPoolRatio where the release computes it from flags alone); runs its
handle_pd_disaggregation (pd_args.py) on a decode-flag matrix and compares the message it raises
with kvpilot check's violations; and checks the
rule-message table in rule_messages.py against each release's source. Prints a line per
release, every disagreement, and a closing `N passed, N failed`; exits 1 on any failure.

The `cli` part checks that src/sglang/server_cli.tsv is what each release's own parser declares
(server_cli.py) and runs a generated corpus of argvs per release through that parser
(server_cli.py, argparse alone) and through `kvpilot check`: both must accept or refuse each,
with argparse's message.

Also runs each release's cache-flag checks (cache_args.py: the PD hook, then the cache
compatibility check) on a decode-flag matrix and compares as for the PD argument checks.

  --oracle-only   run and count only SGLang's side (no kvpilot binary needed)
The `handshake` part runs each release's prefill <-> decode handshake (handshake.py: the decode
KV manager's try_ensure_parallel_info and rank mapping) on prefill/decode server pairs and
compares the message it raises with kvpilot's handshake-phase violations.

  --only PART     run only these parts (repeatable): served, classification, retraction,
                  pd-args, cache-args, mamba-args, draft, handshake, messages, argv, cli
  --jobs N        releases checked side by side (default: one per core)
"""

import argparse
import io
import os
import sys
import threading
from concurrent.futures import ThreadPoolExecutor

import rule_messages
from releases import RELEASES

from compare.arg_checks import (
    cache_args_manifest, cache_args_scenarios, compare_arg_checks, pd_args_manifest, pd_args_scenarios,
    sglang_cache_args, sglang_pd_args)
from compare.argv import check_rendered_argvs, check_router_argvs, check_server_cli
from compare.cache_flags import check_hisparse, check_mamba_args, check_server_cache_args
from compare.classification import (
    check_served_architectures, disagreements, dspark_draft_is_the_head, eagle_draft_lacks_nextn,
    fixture_configs, is_served, served_architectures, sglang_classification)
from compare.common import kvpilot_layout, kvpilot_reports, supports_sglang_version
from compare.flag_combinations import check_flag_combinations
from compare.handshake import check_handshake
from compare.model_hooks import (
    check_dsa_kv_cache, check_dsv4_hook, check_family_overrides, check_iquest_mtp, check_language_model_only,
    check_mimo_v2_hook, check_model_overrides)
from compare.parallelism import check_context_parallel, check_parallel_shape
from compare.retraction import manifest, retraction_scenarios, sglang_retraction
from compare.speculative import check_draft_geometry, check_speculative_names, check_speculative_parallel
from compare.tree_cache import check_tree_cache


PARTS = ("served", "classification", "retraction", "pd-args", "cache-args", "mamba-args", "draft", "handshake",
         "tree-cache", "speculative", "speculative-parallel", "dsv4-hook", "model-overrides", "family-overrides",
         "context-parallel", "dsa-kv-cache", "iquest-mtp", "parallel-shape", "hisparse", "mimo-v2-hook",
         "flag-combinations", "language-model-only", "messages", "argv", "cli")


# The parts that run one release's code on their own scenarios and compare with kvpilot, each
# returning (passed, failed, summary), in the order their summaries are printed.
PER_RELEASE_CHECKS = (("cache-args", check_server_cache_args), ("mamba-args", check_mamba_args), ("draft", check_draft_geometry),
                      ("speculative", check_speculative_names),
                      ("speculative-parallel", check_speculative_parallel), ("dsv4-hook", check_dsv4_hook),
                      ("model-overrides", check_model_overrides),
                      ("family-overrides", check_family_overrides),
                      ("context-parallel", check_context_parallel),
                      ("dsa-kv-cache", check_dsa_kv_cache),
                      ("iquest-mtp", check_iquest_mtp),
                      ("parallel-shape", check_parallel_shape),
                      ("hisparse", check_hisparse),
                      ("mimo-v2-hook", check_mimo_v2_hook),
                      ("flag-combinations", check_flag_combinations),
                      ("language-model-only", check_language_model_only),
                      ("tree-cache", check_tree_cache),
                      ("handshake", check_handshake))


class ReleaseWorkers:
    """Runs one function per release on `jobs` threads. Nearly all the work is in the child
    processes each release starts (its own interpreter running SGLang's code, `kvpilot check`),
    so releases run side by side on every core. What a release prints is held back and written
    whole, in release order, so the output reads as a sequential run's."""

    def __init__(self, jobs):
        self.pool = ThreadPoolExecutor(max_workers=jobs)
        self.stdout = sys.stdout

    def map(self, function, releases):
        """`function(release)` for every release; yields the results in release order."""
        def captured(release):
            _thread_output.buffer = io.StringIO()
            try:
                return function(release), _thread_output.buffer.getvalue()
            finally:
                del _thread_output.buffer

        for result, printed in self.pool.map(captured, releases):
            self.stdout.write(printed)
            self.stdout.flush()
            yield result

    def __enter__(self):
        sys.stdout = _ThreadStdout(self.stdout)
        return self

    def __exit__(self, *_exc):
        sys.stdout = self.stdout
        self.pool.shutdown(cancel_futures=True)


_thread_output = threading.local()


class _ThreadStdout(io.TextIOBase):
    """sys.stdout while ReleaseWorkers run: a worker thread's prints go to its own buffer."""

    def __init__(self, real):
        self.real = real

    def write(self, text):
        return getattr(_thread_output, "buffer", self.real).write(text)

    def flush(self):
        self.real.flush()


def check_release(release, args, parts, compare, configs, served, raised_by_check):
    """Every per-release part on one release. Returns (passed, failed); prints its disagreements
    and its summary line."""
    passed = failed = 0
    version = release.version
    summary = ""
    if "classification" in parts:
        verdicts = sglang_classification(os.path.join(args.src, version), args.venvs, configs)
        loaded = refused = refused_by_both = harness_errors = agreements = disagreeing = 0
        nextn_decided, dspark_heads = {False: 0, True: 0}, 0
        for config in configs:
            name = os.path.basename(config)
            verdict = verdicts.get(name, {"harnessError": "no output from classify.py"})
            if "harnessError" in verdict:
                harness_errors += 1
                print(f"  {version} {name}: the harness could not run SGLang's code: "
                      f"{verdict['harnessError']}")
                continue
            if not verdict["loaded"]:
                # SGLang itself cannot load this config: nothing to compare. Counted, not
                # judged: most refusals are architectures the release has no config class
                # for, where kvpilot warns instead of refusing; the count shows the loader
                # refusals kvpilot models (Gemma-4 on transformers 5.19.0).
                refused += 1
                if compare and kvpilot_layout(args.kvpilot, config, version)[1] is not None:
                    refused_by_both += 1
                continue
            loaded += 1
            if not compare:
                continue
            layout, error = kvpilot_layout(args.kvpilot, config, version)
            if error is not None:
                disagreeing += 1
                print(f"  {version} {name}: SGLang classifies it, kvpilot fails: {error}")
                continue
            differences = disagreements(
                verdict, layout, is_served(served, verdict["architecture"], version))
            if differences:
                disagreeing += 1
                diff = ", ".join(f"{fact} SGLang={s} kvpilot={k}" for fact, s, k in differences)
                print(f"  {version} {name}: {diff}")
            else:
                agreements += 1
                lacks = eagle_draft_lacks_nextn(verdict)
                if lacks is not None:
                    nextn_decided[lacks] += 1
                dspark_heads += dspark_draft_is_the_head(verdict) is True
        summary += (f"; configs {len(configs)}: classified by SGLang {loaded}, "
                    f"refused by SGLang's loader {refused}")
        if compare:
            summary += f" (refused by kvpilot too {refused_by_both})"
        summary += f", harness errors {harness_errors}"
        if compare:
            summary += (f"; compared {loaded}, agreements {agreements} (EAGLE drafts with NextN "
                        f"layers {nextn_decided[False]}, without {nextn_decided[True]}; DSPARK drafts "
                        f"that are the DSpark head "
                        f"{dspark_heads})")
        failed += harness_errors + disagreeing
        passed += agreements if compare else loaded
    if "retraction" in parts:
        scenarios = retraction_scenarios()
        resolved = sglang_retraction(os.path.join(args.src, version), args.venvs, scenarios)
        runnable = [s for s in scenarios if "backend" in resolved[s["id"]]]
        scenario_agreements = 0
        if compare and runnable:
            reports = kvpilot_reports(args.kvpilot, [manifest(s) for s in runnable], version)
            for scenario in runnable:
                ours = reports.get(scenario["id"], {}).get("effective") or {}
                theirs = resolved[scenario["id"]]
                differences = [("retractionBackup", theirs["backend"],
                                ours.get("retractionBackup"))]
                # The ratio sizes the host pool, which exists only with host_pool.
                if theirs.get("hicacheRatio") is not None and theirs["backend"] == "host_pool":
                    differences.append(("hostPoolRatio", theirs["hicacheRatio"],
                                        ours.get("hostPoolRatio")))
                differences = [d for d in differences if d[1] != d[2]]
                if differences:
                    failed += 1
                    flags = ", ".join(f"{k}={v}" for k, v in scenario["flags"].items())
                    diff = ", ".join(f"{f} SGLang={s} kvpilot={k}" for f, s, k in differences)
                    print(f"  {version} retraction {os.path.basename(scenario['config'])} "
                          f"[{flags}]: {diff}")
                else:
                    scenario_agreements += 1
        summary += (f"; retraction scenarios {len(scenarios)}: run by SGLang {len(runnable)}")
        if compare:
            summary += f", agreements {scenario_agreements}"
        passed += scenario_agreements if compare else len(runnable)
    for part, check in PER_RELEASE_CHECKS:
        if part in parts:
            part_passed, part_failed, part_summary = check(
                args.kvpilot, os.path.join(args.src, version), args.venvs, version, compare)
            passed, failed = passed + part_passed, failed + part_failed
            summary += f"; {part_summary}"
    for label, scenarios, manifest_of, raised, prefixes in raised_by_check:
        summary += f"; {label} scenarios {len(scenarios)} run by SGLang"
        if compare:
            agreements, disagreeing, by_rule = compare_arg_checks(
                args.kvpilot, version, scenarios, manifest_of, raised[version], prefixes,
                label)
            refusing = sum(raised[version][s["id"]] is not None for s in scenarios)
            rules = " ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items()))
            summary += f" (refused {refusing}; by rule: {rules}), agreements {agreements}"
            passed, failed = passed + agreements, failed + disagreeing
        else:
            passed += len(scenarios)
    if "messages" in parts:
        messages_ok, message_failures = rule_messages.check(
            os.path.join(args.src, version), version)
        for failure in message_failures:
            print(f"  {version} rule message {failure}")
        summary += (f"; rule messages (static table) {messages_ok + len(message_failures)}, "
                    f"as the table says {messages_ok}")
        failed += len(message_failures)
        passed += messages_ok
    if compare and "argv" in parts:
        argv_passed, argv_failed, argv_summary = check_rendered_argvs(
            args.kvpilot, os.path.join(args.src, version), args.venvs, version)
        passed, failed = passed + argv_passed, failed + argv_failed
        summary += f"; {argv_summary}"
    print(f"SGLang {version}: {summary.removeprefix('; ')}")
    return passed, failed


def main():
    parser = argparse.ArgumentParser(description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--src", required=True, help="folder holding <version>/sglang/srt")
    parser.add_argument("--venvs", required=True, help="folder holding venv-<transformers pin>")
    parser.add_argument("--kvpilot", help="the kvpilot binary to compare")
    parser.add_argument("--oracle-only", action="store_true")
    parser.add_argument("--only", action="append", choices=PARTS,
                        help="run only this part (repeatable); every part by default")
    parser.add_argument("--jobs", type=int, default=os.cpu_count() or 1,
                        help="releases checked side by side (default: one per core)")
    args = parser.parse_args()
    parts = set(args.only or PARTS)

    passed = failed = 0
    if "served" in parts:
        if check_served_architectures(args.src):
            passed += 1
        else:
            failed += 1

    compare = not args.oracle_only
    if compare and (not args.kvpilot or not os.access(args.kvpilot, os.X_OK)):
        print(f"parity: no kvpilot binary at {args.kvpilot!r}; build it (cargo build) or set "
              "KVPILOT_BIN")
        compare, failed = False, failed + 1
    elif compare and not supports_sglang_version(args.kvpilot):
        print(f"parity: {args.kvpilot} has no `layout --sglang-version`; the comparison needs "
              "the release profiles of issue #14 (items 1-2). Only SGLang's side ran.")
        compare, failed = False, failed + 1

    if "cli" in parts:
        cli_passed, cli_failed = check_server_cli(args.kvpilot, args.src, args.venvs, compare)
        passed, failed = passed + cli_passed, failed + cli_failed

    configs = fixture_configs()
    served = served_architectures()
    # Any release's wording counts: kvpilot must not raise an older or newer variant of a
    # message where this release accepts.
    arg_checks = []
    if "pd-args" in parts:
        arg_checks.append(("PD args", pd_args_scenarios(), pd_args_manifest, sglang_pd_args))
    if "cache-args" in parts:
        arg_checks.append(("cache args", cache_args_scenarios(), cache_args_manifest,
                           sglang_cache_args))
    raised_by_check = []
    with ReleaseWorkers(args.jobs) as workers:
        for label, scenarios, manifest_of, run_check in arg_checks:
            raised, prefixes = {}, set()
            answers = workers.map(lambda release: run_check(
                os.path.join(args.src, release.version), args.venvs, scenarios), RELEASES)
            for release, (release_prefixes, release_raised) in zip(RELEASES, answers):
                raised[release.version] = release_raised
                prefixes.update(release_prefixes)
            raised_by_check.append((label, scenarios, manifest_of, raised, prefixes))
        for release_passed, release_failed in workers.map(
                lambda release: check_release(release, args, parts, compare, configs, served,
                                              raised_by_check), RELEASES):
            passed, failed = passed + release_passed, failed + release_failed

    if compare:
        router_passed, router_failed, router_summary = check_router_argvs(args.kvpilot, args.venvs, RELEASES[-1].version)
        print(router_summary)
        passed, failed = passed + router_passed, failed + router_failed
    print(f"{passed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
