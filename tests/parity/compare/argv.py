"""Command lines: the ones kvpilot renders through each release's parser and the router's, and
src/sglang/server_cli.tsv with its argv corpus through each release's parser and `kvpilot check`."""

import glob
import json
import os
import subprocess
from concurrent.futures import ThreadPoolExecutor

import server_cli

from compare.arg_checks import PD_ARGS_CONFIG
from compare.common import HERE, ROOT, SERVER_CLI_TSV, kvpilot_check_json, run_release_script


def rendered_items(kvpilot, path, version):
    """The objects `kvpilot render -o json` gives for one example at `version`; rejected examples
    render none."""
    proc = subprocess.run([kvpilot, "render", "-o", "json", "--offline", "--sglang-version", version, "-f", path],
                          capture_output=True, text=True, check=False)
    if proc.returncode not in (0, 1):
        raise RuntimeError(f"kvpilot render {path} failed ({proc.returncode}): {proc.stderr[-500:]}")
    return json.loads(proc.stdout)["items"]


def rendered_argvs(kvpilot, version):
    """The SGLang argv of every server pod (prefill and decode) `kvpilot render` gives for the
    examples, at `version`: [{"id": "example.yaml pod-name", "example", "argv", "annotations"}]."""
    cases = []
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        for item in rendered_items(kvpilot, path, version):
            if item["kind"] != "Pod":
                continue
            container = item["spec"]["containers"][0]
            if container["command"] != ["python3", "-m", "sglang.launch_server"]:
                raise RuntimeError(f"{path}: {item['metadata']['name']} does not run sglang.launch_server")
            cases.append({"id": f"{os.path.basename(path)} {item['metadata']['name']}",
                          "example": os.path.basename(path), "argv": container["args"],
                          "annotations": item["metadata"].get("annotations", {})})
    return cases


def pairing_disagreements(cases, results):
    """What SGLang parsed for an example's prefill and decode servers that cannot pair: another
    transfer backend, page size or KV dtype, or a bootstrap port other than the one the prefill
    pod's annotation gives the router."""
    problems = []
    by_example = {}
    for case, result in zip(cases, results):
        if result.get("parsed"):
            by_example.setdefault(case["example"], []).append((case, result["parsed"]))
    for example, servers in by_example.items():
        prefill = [(c, p) for c, p in servers if p["disaggregation_mode"] == "prefill"]
        decode = [p for _, p in servers if p["disaggregation_mode"] == "decode"]
        for case, parsed in prefill:
            annotated = case["annotations"].get("sglang.ai/bootstrap-port")
            if str(parsed["disaggregation_bootstrap_port"]) != annotated:
                problems.append(f"{case['id']}: bootstrap port {parsed['disaggregation_bootstrap_port']}, "
                                f"annotation {annotated}")
            for other in decode:
                for field in ("disaggregation_transfer_backend", "page_size", "kv_cache_dtype"):
                    if parsed[field] != other[field]:
                        problems.append(f"{case['id']}: {field} {parsed[field]!r}, decode {other[field]!r}")
    return problems, sum(1 for servers in by_example.values()
                         if any(p["disaggregation_mode"] == "prefill" for _, p in servers))


def check_rendered_argvs(kvpilot, src, venvs, version):
    """Each rendered decode argv through the release's own parser and post-parse checks.
    Returns (passed, failed, summary)."""
    cases = rendered_argvs(kvpilot, version)
    # A control: the parser must refuse what it does not know, or its acceptance means nothing.
    control = {"id": "control", "argv": cases[0]["argv"] + ["--no-such-sglang-flag"]} if cases else None
    answer = run_release_script("server_argv.py", src, venvs, cases + ([control] if control else []))
    passed = failed = post_ran = 0
    if control:
        refused = answer["results"].pop()["error"] or ""
        if "unrecognized arguments: --no-such-sglang-flag" not in refused:
            failed += 1
            print(f"  {version} argv control: the parser accepted an unknown flag ({refused!r})")
    for case, result in zip(cases, answer["results"]):
        post = result["postInit"] or {}
        if result["error"] is not None:
            failed += 1
            print(f"  {version} {case['id']}: SGLang's parser refuses the rendered argv: {result['error']}")
        elif "error" in post:
            failed += 1
            print(f"  {version} {case['id']}: ServerArgs refuses the rendered argv: {post['error']}")
        else:
            passed += 1
            post_ran += "ok" in post
    problems, paired = pairing_disagreements(cases, answer["results"])
    for problem in problems:
        failed += 1
        print(f"  {version} prefill/decode pairing {problem}")
    summary = (f"server argv {len(cases)}: accepted by the parser {len(cases) - sum(r['error'] is not None for r in answer['results'])}"
               f", post-parse checks ran to the end {post_ran} (the rest stop at missing hardware)"
               f"; examples with prefill and decode paired as SGLang parsed them {paired - len(problems)} of {paired}")
    passed += paired if not problems else 0
    return passed, failed, summary


def check_router_argvs(kvpilot, venvs, version):
    """Each rendered router argv through sglang-router 0.3.2's and smg 1.13.0's own
    parse_router_args, with a control; the selectors it parsed select exactly the rank-0 pods of
    their fleet among the rendered pods. Returns (passed, failed, summary)."""
    python = os.path.join(venvs, "venv-router", "bin", "python")
    cases, pods = [], {}
    for path in sorted(glob.glob(os.path.join(ROOT, "examples", "*.yaml"))):
        items = rendered_items(kvpilot, path, version)
        pods[os.path.basename(path)] = [i["metadata"] for i in items if i["kind"] == "Pod"]
        for item in items:
            if item["kind"] != "Deployment":
                continue
            container = item["spec"]["template"]["spec"]["containers"][0]
            for package in ("sglang_router", "smg"):
                cases.append({"id": f"{os.path.basename(path)} {package}", "package": package,
                              "example": os.path.basename(path), "argv": container["args"]})
    if not cases:
        return 0, 1, "router argv: no example renders a router"
    controls = [{"id": f"control {c['package']}", "package": c["package"], "argv": c["argv"] + ["--no-such-router-flag"]}
                for c in cases[:2]]
    proc = subprocess.run([python, os.path.join(HERE, "router_argv.py")], input=json.dumps(cases + controls),
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"router_argv.py failed:\n{proc.stderr[-2000:]}")
    results = json.loads(proc.stdout)["results"]
    passed = failed = 0
    for control in results[len(cases):]:
        if "unrecognized arguments: --no-such-router-flag" not in (control["error"] or ""):
            failed += 1
            print(f"  router {control['id']}: the parser accepted an unknown flag ({control['error']!r})")
    for case, result in zip(cases, results):
        args = result["args"]
        if result["error"] is not None:
            failed += 1
            print(f"  router {case['id']}: the router's parser refuses the rendered argv: {result['error']}")
            continue
        wrong = [f for f in ("pd_disaggregation", "service_discovery") if args.get(f) is not True]
        for fleet, key in (("prefill", "prefill_selector"), ("decode", "decode_selector")):
            selector = args.get(key) or {}
            selected = sorted(m["name"] for m in pods[case["example"]]
                              if selector and all(m["labels"].get(k) == v for k, v in selector.items()))
            expected = sorted(m["name"] for m in pods[case["example"]]
                              if m["labels"].get("app.kubernetes.io/name") == f"kvpilot-{fleet}"
                              and m["labels"].get("kvpilot.dev/rank") == "0")
            if not expected or selected != expected:
                wrong.append(f"{key} selects {selected}, the {fleet} fleet's rank-0 pods are {expected}")
        if wrong:
            failed += 1
            print(f"  router {case['id']}: {wrong}")
        else:
            passed += 1
    summary = f"router argv {len(cases)} (sglang-router 0.3.2, smg 1.13.0): accepted with the right selectors {passed}"
    return passed, failed, summary


def server_cli_manifest(version, cases):
    """One Pod per argv, running the release's image, with the model config in a ConfigMap."""
    with open(os.path.join(ROOT, "tests/fixtures/configs", f"{PD_ARGS_CONFIG}.json"), encoding="utf-8") as f:
        config = f.read()
    documents = [{"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "model", "namespace": "parity"},
                  "data": {"config.json": config}}]
    for case in cases:
        documents.append({
            "apiVersion": "v1", "kind": "Pod",
            "metadata": {"name": "argv-" + case["id"].replace(".", "-"), "namespace": "parity",
                         "annotations": {"kvpilot.dev/model-config": "configmap/model"}},
            "spec": {"containers": [{"name": "sglang", "image": f"lmsysorg/sglang:v{version}",
                                     "command": ["python3", "-m", "sglang.launch_server"],
                                     "args": case["argv"]}]},
        })
    return documents


def kvpilot_argv_verdicts(kvpilot, version, cases):
    """case id -> kvpilot's CLI finding message (None: accepted), from one `kvpilot check`."""
    verdicts = {}
    for report in kvpilot_check_json(kvpilot, server_cli_manifest(version, cases)):
        messages = [v["message"] for v in report.get("violations", []) if v["rule"] == "CLI"]
        verdicts[report["name"].split("/")[-1].removeprefix("argv-")] = messages[0] if messages else None
    return verdicts


def same_refusal(theirs, ours, rows):
    """Whether kvpilot's message is SGLang's. Choices held in a set are listed in an order that
    changes with every interpreter: for those options the list is compared as a set."""
    if theirs == ours or theirs is None or ours is None:
        return theirs == ours
    head, _, listed = theirs.removesuffix(")").partition(" (choose from ")
    our_head, _, our_listed = ours.removesuffix(")").partition(" (choose from ")
    option = head.removeprefix("argument ").split(":")[0].split("/")[0]
    unordered = any(r[4].startswith("~") and option in r[0].split(" ") for r in rows)
    return unordered and head == our_head and sorted(listed.split(", ")) == sorted(our_listed.split(", "))


def check_server_cli(kvpilot, src, venvs, compare):
    """The table is current, and every release's own parser and kvpilot agree on accept/refuse
    and on argparse's message for a generated corpus of argvs. Returns (passed, failed)."""
    with server_cli.ReleaseParsers(src, venvs) as parsers:
        rows = parsers.rows
        corpora = {version: server_cli.corpus(rows, version) for version in rows}
        answers = parsers.judge(corpora)
    passed = failed = 0
    text = server_cli.render(rows)
    with open(os.path.join(ROOT, SERVER_CLI_TSV), encoding="utf-8") as f:
        if f.read() == text:
            passed += 1
            print(f"server command line: {SERVER_CLI_TSV} is current")
        else:
            failed += 1
            print(f"server command line: {SERVER_CLI_TSV} is stale; regenerate with `python3 "
                  f"tests/parity/server_cli.py generate {src} {venvs} {SERVER_CLI_TSV}`")
    if compare:
        with ThreadPoolExecutor(max_workers=min(4, os.cpu_count() or 1)) as pool:
            verdicts = dict(zip(rows, pool.map(
                lambda version: kvpilot_argv_verdicts(kvpilot, version, corpora[version]), rows)))
    for version in rows:
        cases = corpora[version]
        theirs = {r["id"]: r["error"] for r in answers[version]}
        harness = [c for c in cases if (theirs[c["id"]] or "").startswith("harness:")]
        for case in harness:
            failed += 1
            print(f"  {version} argv {case['argv']}: the harness could not run the parser: {theirs[case['id']]}")
        refused = sum(theirs[c["id"]] is not None for c in cases)
        summary = f"SGLang {version}: argv corpus {len(cases)}, refused by SGLang's parser {refused}"
        if compare:
            ours = verdicts[version]
            agreements = 0
            for case in cases:
                key = case["id"].replace(".", "-")
                if case in harness:
                    continue
                if key not in ours:
                    failed += 1
                    print(f"  {version} {case['subject']} {case['argv']}: kvpilot reported no verdict")
                elif not same_refusal(theirs[case["id"]], ours[key], rows[version]):
                    failed += 1
                    print(f"  {version} {case['subject']} {case['argv']}: SGLang {theirs[case['id']]!r}, "
                          f"kvpilot {ours[key]!r}")
                else:
                    agreements += 1
            passed += agreements
            summary += f", agreements with kvpilot {agreements}"
        else:
            passed += len(cases) - len(harness)
        print(summary)
    return passed, failed
