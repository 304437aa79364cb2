#!/usr/bin/env python3
"""One SGLang release's IQuest Q1 checks of a speculative server: its override provider, then
the speculative hook's MTP draft checks.

Usage: iquest_mtp.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv", "draftConfig"}: `draftConfig` is the config.json of the
  draft model the argv names as DRAFT_PATH (None where it names none, or the model's own path)
Prints [{"id", "raised", "message"}] on stdout: the message of the first check that refuses the
server, or None. Exits non-zero, naming the file, when a piece of the release's code this needs
is missing or fails on anything but a refusal: a scenario is never silently skipped.

What runs, unchanged, in the release's order:
  - the release's config loader on config.json (`classify.Release.load`);
  - the release's argument parser (as server_argv.py builds it) on the scenario's argv;
  - the IQuest Q1 override provider (arg_groups/model_overrides/iquest_q1.py) where the registry
    gives it the architecture, whole, through the registry's `_invoke_provider`;
  - `_handle_iquest_q1_mtp_draft` (arg_groups/speculative_hook.py), whole, which the speculative
    hook's EAGLE family runs for EAGLE, NEXTN and STANDALONE drafts; it loads the draft model's
    config.json with the release's own `get_config`, from a directory holding the scenario's
    draft config in place of DRAFT_PATH.

Stood in: `resolving_view` reads the parsed namespace, on which `declare_resolution` sets fields;
`model_config_of` is the loaded config, its text config and the parsed `--quantization`;
`get_platform()` is a Hopper GPU's (as in family_overrides.py).
"""

import contextlib
import io
import os
import shutil
import sys
import tempfile
import types

import family_overrides
import pd_args
import server_argv
import sglang_env

HOOK = "_handle_iquest_q1_mtp_draft"
PROVIDER_MODULE = "sglang.srt.arg_groups.model_overrides.iquest_q1"
DRAFT_PATH = "/models/draft"


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)
    hook = pd_args.speculative_hook_function(srt, HOOK)
    drafts = tempfile.mkdtemp(prefix="kvpilot-parity-drafts-")
    draft_dirs = {}
    results = []
    try:
        for scenario in scenarios:
            hf_config = release.loaded(scenario["config"])
            arch = hf_config.architectures[0]
            with contextlib.redirect_stderr(io.StringIO()):
                server = parser.parse_args(scenario["argv"])
            draft = scenario["draftConfig"]
            if draft is not None:
                if draft not in draft_dirs:
                    draft_dirs[draft] = tempfile.mkdtemp(dir=drafts)
                    shutil.copy(draft, os.path.join(draft_dirs[draft], "config.json"))
                if server.speculative_draft_model_path != DRAFT_PATH:
                    raise SystemExit(f"{scenario['id']}: a draftConfig needs --speculative-draft-model-path {DRAFT_PATH}")
                server.speculative_draft_model_path = draft_dirs[draft]
            model_config = types.SimpleNamespace(
                hf_config=hf_config, hf_text_config=release.get_hf_text_config(hf_config),
                quantization=server.quantization)
            stand_ins = dict(server_argv.VIEWS, model_config_of=lambda _args, model_config=model_config: model_config,
                             get_platform=family_overrides.HopperPlatform)
            base, providers = release.override_providers(arch)
            ours = [fn for fn in providers if fn.__module__ == PROVIDER_MODULE]
            for fn in ours:
                fn.__globals__.update(stand_ins)
            hook.__globals__.update(stand_ins)
            message = None
            try:
                for fn in ours:
                    sglang_env.quietly(base._invoke_provider, fn, server, hf_config)
                sglang_env.quietly(hook, server)
            except ValueError as e:
                message = str(e)
            except Exception as e:
                raise SystemExit(f"IQuest Q1 checks failed on {scenario['id']} ({' '.join(scenario['argv'])}): "
                                 f"{type(e).__name__}: {e}") from e
            results.append({"id": scenario["id"], "raised": message is not None, "message": message})
    finally:
        shutil.rmtree(drafts, ignore_errors=True)
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
