"""What every comparison shares: a release's script run on its scenarios, `kvpilot check` and
`kvpilot layout`, Pods running a release's command lines for the guard, and the comparison of
the first refusal on each side."""

import collections
import json
import os
import subprocess
import tempfile

from releases import release_python


# The harness's directory (tests/parity), which holds the release-side scripts.
HERE = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
ROOT = os.path.dirname(os.path.dirname(HERE))
FIXTURE_GLOBS = ("tests/fixtures/configs/*.json", "tests/fixtures/configs/parity/*.json")
SERVED_TSV = "src/layout/served_architectures.tsv"
SERVER_CLI_TSV = "src/sglang/server_cli.tsv"


def supports_sglang_version(kvpilot):
    proc = subprocess.run([kvpilot, "layout", "--help"], capture_output=True, text=True,
                          check=False)
    return "--sglang-version" in proc.stdout


def kvpilot_layout(kvpilot, config, version):
    proc = subprocess.run([kvpilot, "layout", "--config", config, "--sglang-version", version],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        return None, proc.stderr.strip() or f"exit code {proc.returncode}"
    try:
        return json.loads(proc.stdout), None
    except json.JSONDecodeError as e:
        return None, f"output is not JSON: {e}"


def run_release_script(script, src, venvs, scenarios):
    """Runs one of this directory's scripts on a release's sources with the scenarios on
    stdin, in that release's venv, and returns its JSON answer."""
    proc = subprocess.run([release_python(src, venvs), os.path.join(HERE, script), src],
                          input=json.dumps(scenarios), capture_output=True, text=True,
                          check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"{script} failed on {src}:\n{proc.stderr[-2000:]}")
    return json.loads(proc.stdout)


def kvpilot_check_json(kvpilot, documents, version=None):
    """`kvpilot check --output json` on the documents (one multi-document file), at `version`
    when given (else the release each image names)."""
    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write("\n---\n".join(json.dumps(d) for d in documents))
        path = f.name
    release = ["--sglang-version", version] if version else []
    try:
        proc = subprocess.run([kvpilot, "check", "-f", path, *release, "--output", "json", "--offline"],
                              capture_output=True, text=True, check=False)
    finally:
        os.unlink(path)
    try:
        return json.loads(proc.stdout)
    except json.JSONDecodeError:
        raise RuntimeError(f"kvpilot check printed no JSON (exit {proc.returncode}): "
                           f"{proc.stderr.strip()[:500]}") from None


def kvpilot_reports(kvpilot, manifests, version):
    """kvpilot check's report per manifest name (all manifests in one multi-document file)."""
    return {r["name"].split("/")[-1]: r for r in kvpilot_check_json(kvpilot, manifests, version)}


def compare_first_refusal(scenarios, theirs, reports, compared_rule, describe):
    """SGLang raises one message per scenario (the first check that fails), kvpilot reports every
    violation: they agree when SGLang's message is among kvpilot's violations that
    `compared_rule` selects, or when neither has one. Prints each disagreement (`describe` names
    the scenario) and returns (agreements, disagreements, SGLang's refusals counted by kvpilot's
    rule id as text)."""
    agreements = failed = 0
    by_rule = collections.Counter()
    for scenario in scenarios:
        ours = {v["message"]: v["rule"] for v in reports.get(scenario["id"], {}).get("violations", [])
                if compared_rule(v)}
        answer = theirs[scenario["id"]]
        message = answer["message"]
        if (message in ours) if message else not ours:
            agreements += 1
            if message:
                by_rule[ours[message]] += 1
            continue
        failed += 1
        cache = f" ({answer['cache']})" if answer.get("cache") else ""
        print(f"  {describe(scenario)}: SGLang {message!r}{cache}, kvpilot {sorted(ours)}")
    rules = " ".join(f"{rule} {count}" for rule, count in sorted(by_rule.items()))
    return agreements, failed, rules


def role_argv(role):
    """The flags of a PD server of `role` (decode or prefill, over Mooncake); none for "null", a
    server without PD."""
    return [] if role == "null" else ["--disaggregation-mode", role, "--disaggregation-transfer-backend", "mooncake"]


def settings_argv(scenario, options):
    """The flags of a scenario's settings, for each (key, flag, unset) of `options`: none where
    the setting is `unset`, the flag alone where it is True, else the flag and the value."""
    argv = []
    for key, flag, unset in options:
        value = scenario[key]
        if value != unset:
            argv += [flag] if value is True else [flag, str(value)]
    return argv


def guard_pods(version, scenarios, argv_of, env_of=lambda _: {}, draft_of=lambda _: None):
    """One Pod per scenario running `argv_of(scenario)` with the env `env_of(scenario)`, its config
    inline through a ConfigMap, and the draft model's config `draft_of(scenario)` (a fixture path,
    or None for none) the same way, for `kvpilot check`."""
    documents, config_maps = [], {}

    def config_map(path):
        name = os.path.basename(path).removesuffix(".json")
        if name not in config_maps:
            with open(path, encoding="utf-8") as f:
                config_maps[name] = {"apiVersion": "v1", "kind": "ConfigMap",
                                     "metadata": {"name": name, "namespace": "parity"},
                                     "data": {"config.json": f.read()}}
        return f"configmap/{name}"

    for scenario in scenarios:
        env = [{"name": k, "value": v} for k, v in env_of(scenario).items()]
        annotations = {"kvpilot.dev/model-config": config_map(scenario["config"])}
        if draft_of(scenario) is not None:
            annotations["kvpilot.dev/draft-model-config"] = config_map(draft_of(scenario))
        documents.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": scenario["id"], "namespace": "parity", "annotations": annotations},
            "spec": {"containers": [{"name": "sglang", "image": f"lmsysorg/sglang:v{version}",
                                     "command": ["python3", "-m", "sglang.launch_server"],
                                     "args": argv_of(scenario), "env": env}]}})
    return list(config_maps.values()) + documents


def check_with_guard(kvpilot, src, venvs, version, compare, part):
    """One release's script on a part's scenarios against the guard's `part["rules"]` on the same
    servers' command lines (`part`: label, scenarios, script, argv, env, and draft: the draft
    model's config of a scenario). Returns (passed, failed, summary)."""
    scenarios = part["scenarios"]
    env_of = part.get("env", lambda _: {})
    theirs = {r["id"]: r for r in run_release_script(part["script"], src, venvs, scenarios)}
    summary = (f"{part['label']} scenarios {len(scenarios)} (refused by SGLang "
               f"{sum(r['raised'] for r in theirs.values())}")
    if not compare:
        return len(scenarios), 0, summary + ")"
    pods = guard_pods(version, scenarios, part["argv"], env_of, part.get("draft", lambda _: None))
    reports = {r["name"].split("/")[-1]: r for r in kvpilot_check_json(kvpilot, pods)}
    agreements, failed, rules = compare_first_refusal(
        scenarios, theirs, reports, lambda v: v["rule"] in part["rules"],
        lambda s: (f"{version} {part['label']} {os.path.basename(s['config'])} {' '.join(part['argv'](s)[2:])} "
                   f"env {env_of(s)}"))
    return agreements, failed, summary + f"; by rule: {rules}), agreements {agreements}"


def fixture(name):
    return os.path.join(ROOT, "tests/fixtures/configs", f"{name}.json")
