#!/usr/bin/env python3
"""One SGLang release's checks of `--language-model-only` on a server's command line: not under
PD (DeepSeek-V4.1 excepted from 0.5.22), and only for the architectures the release lists.

Usage: language_model_only.py SGLANG_SRC < scenarios.json
  scenario: {"id", "config", "argv"}
Prints [{"id", "raised", "message"}] on stdout: the message of the check's refusal, or None.
Exits non-zero, naming the file, when a piece of the release's code this needs is missing or
fails on anything but a refusal.

What runs, unchanged: the release's language-model-only handler, whole
(`handle_language_model_only` of arg_groups/model_hook.py from 0.5.19, `ServerArgs.
_handle_language_model_only` in 0.5.18; 0.5.17 has no such flag), with the release's
`ServerArgs.LANGUAGE_MODEL_ONLY_ARCHITECTURES`, on the namespace the release's parser (as
server_argv.py builds it) makes of the scenario's argv, and the config as the release's own
loader loads it (classify.py).

Stood in: `resolving_view` reads the parsed namespace; the model config (`model_config_of`, or
`self.get_model_config()` in 0.5.18) holds the loaded config. The scenarios set none of the
multimodal flags the handler refuses first.
"""

import os
import sys
import types

import server_argv
import sglang_env

HANDLERS = ((os.path.join("arg_groups", "model_hook.py"), "sglang.srt.arg_groups.model_hook", None,
             "handle_language_model_only"),
            ("server_args.py", "sglang.srt.server_args", "ServerArgs", "_handle_language_model_only"))


def main(src, scenarios):
    srt, release, parser = server_argv.release_parts(src)
    path, module, name, _fn = server_argv.hook_function(srt, HANDLERS, "language-model-only handler")
    server_args_cls, _unloaded = server_argv.load_server_args()
    if module == "sglang.srt.server_args":
        handler = getattr(server_args_cls, name)
    else:
        handler = server_argv.hook_globals(path, module)[name]
    handler.__globals__.update(server_argv.VIEWS)
    supported = server_args_cls.LANGUAGE_MODEL_ONLY_ARCHITECTURES
    results = []
    for scenario in scenarios:
        model_config = types.SimpleNamespace(hf_config=release.loaded(scenario["config"]))
        server = parser.parse_args(scenario["argv"])
        server.LANGUAGE_MODEL_ONLY_ARCHITECTURES = supported
        server.get_model_config = lambda model_config=model_config: model_config
        handler.__globals__["model_config_of"] = lambda _args, model_config=model_config: model_config
        results.append(server_argv.refusal_result(path, scenario, lambda server=server: handler(server)))
    return results


if __name__ == "__main__":
    sys.exit(sglang_env.release_main(__doc__, main))
