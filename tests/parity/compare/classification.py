"""The attention-layout classification: each release's own (classify.py) against `kvpilot layout`
on every fixture config, and src/layout/served_architectures.tsv against the releases' model code."""

import glob
import json
import os
import subprocess
import sys

from releases import release_python, version_key

from compare.common import FIXTURE_GLOBS, HERE, ROOT, SERVED_TSV


def fixture_configs():
    return sorted(p for pattern in FIXTURE_GLOBS for p in glob.glob(os.path.join(ROOT, pattern)))


def sglang_classification(src, venvs, configs):
    """The release's verdict per config file name (classify.py output)."""
    proc = subprocess.run([release_python(src, venvs), os.path.join(HERE, "classify.py"), src,
                           *configs],
                          capture_output=True, text=True, check=False)
    if proc.returncode != 0:
        raise RuntimeError(f"classify.py failed on {src}:\n{proc.stderr[-2000:]}")
    results = [json.loads(line) for line in proc.stdout.splitlines() if line.startswith("{")]
    return {r["file"]: r for r in results}


def kvpilot_facts(layout):
    """kvpilot's layout JSON (src/api/layout_types.rs) in the oracle's terms."""
    pool = layout["kvPool"]
    features = set(layout.get("features", []))
    return {
        "isHybridSwa": pool in ("hybrid-swa", "pure-swa"),
        "usesSsmState": pool == "hybrid-ssm",
        "isMla": layout["attention"] == "mla",
        "isDsa": "dsa" in features,
        "isSwaCompress": "swa-compress" in features,
        "hasRatio2Layers": "deepseek-v4.1" in features,
        "noNextnLayers": "no-nextn-layers" in features,
        "dsparkHead": "dspark-head" in features,
        "hasLearnableSinks": "learnable-attention-sinks" in features,
        "hiddenSize": layout.get("hiddenSize"),
        "vocabSize": layout.get("vocabSize"),
        "mtpDraft": layout.get("mtpDraft"),
        "mambaChunkSize": layout.get("mambaChunkSize"),
        "dsaIndexKpool": layout.get("dsaIndexKpool"),
        "attentionProjectionLayout": layout.get("attentionProjectionLayout"),
        "fusedQkvAttentionTp": layout.get("fusedQkvAttentionTp"),
        "fullLayers": layout["layers"]["fullAttention"],
        "swaLayers": layout["layers"]["slidingWindow"],
    }


# How kvpilot says a release has no model code for an architecture (issue #14 item 6:
# "SGLang 0.5.23 has no model for JambaForCausalLM"), in `warnings` of its layout.
NO_MODEL_WARNING = "has no model for"


def served_architectures():
    """architecture -> (first, last or None), from the TSV the harness keeps current."""
    served = {}
    with open(os.path.join(ROOT, SERVED_TSV), encoding="utf-8") as f:
        for line in f:
            if line.startswith("#") or not line.strip():
                continue
            name, first, last = line.rstrip("\n").split("\t")
            served[name] = (first, None if last == "-" else last)
    return served


def is_served(served, architecture, version):
    if architecture not in served:
        return False
    first, last = served[architecture]
    return version_key(first) <= version_key(version) and (
        last is None or version_key(version) <= version_key(last))


def disagreements(sglang, layout, served):
    """(fact, SGLang's value, kvpilot's value) for each fact the two sides state differently.
    Layer counts are SGLang's pool split, so they are compared only where SGLang splits (hybrid
    SWA with per-layer ids; DeepSeek-V4's compressed pool has none). `servedBySglang` is whether
    the release has model code for the architecture its config loader settles on (SGLang's
    config classes rename some, e.g. Olmo3ForCausalLM to Olmo2ForCausalLM); kvpilot must warn
    exactly when it has none."""
    ours = dict(kvpilot_facts(layout), servedBySglang=not any(
        NO_MODEL_WARNING in w for w in layout.get("warnings", [])))
    theirs = dict(sglang, servedBySglang=served)
    facts = ["isHybridSwa", "usesSsmState", "isMla", "isDsa", "isSwaCompress", "hasRatio2Layers",
             "hasLearnableSinks", "servedBySglang"]
    if sglang["isHybridSwa"] and sglang["fullLayers"] is not None:
        facts += ["fullLayers", "swaLayers"]
    # The sizes where kvpilot states them (it leaves those of config classes it does not know
    # to the release), the MTP draft facts, the Mamba chunk size, DSA's pooled index keys and the
    # QKV projection layout always.
    facts += [f for f in ("hiddenSize", "vocabSize") if ours[f] is not None] + [
        "mtpDraft", "mambaChunkSize", "dsaIndexKpool", "attentionProjectionLayout", "fusedQkvAttentionTp"]
    differences = [(f, theirs[f], ours[f]) for f in facts if theirs[f] != ours[f]]
    # N6 and X4 fire for an EAGLE draft kvpilot names the feature for. kvpilot leaves the count
    # to SGLang only for config classes that may supply one config.json does not name
    # (src/layout/arch.rs, NEXTN_DEFAULTING_MODEL_TYPES); no fixture is such a draft without
    # NextN layers, so the comparison is exact.
    lacks = eagle_draft_lacks_nextn(sglang)
    if lacks is not None and lacks != ours["noNextnLayers"]:
        differences.append(("noNextnLayers", lacks, ours["noNextnLayers"]))
    head = dspark_draft_is_the_head(sglang)
    if head is not None and head != ours["dsparkHead"]:
        differences.append(("dsparkHead", head, ours["dsparkHead"]))
    return differences


DSPARK_HEAD = "DeepseekV4ForCausalLMDSpark"


def dspark_draft_is_the_head(sglang):
    """Whether the DSPARK draft the release builds from the config is DeepSeek-V4's DSpark head,
    which `_can_pack_hicache_mtp` packs; None where the release could not build it."""
    architecture = sglang.get("draftArchitectureUnderDspark")
    return None if architecture is None or isinstance(architecture, dict) else architecture == DSPARK_HEAD


def eagle_draft_lacks_nextn(sglang):
    """Whether the EAGLE draft the release builds from the config has no NextN layers; None
    where the release could not build it."""
    layers = sglang.get("draftNextnLayers")
    return None if isinstance(layers, dict) else not layers


def check_served_architectures(src):
    proc = subprocess.run([sys.executable, os.path.join(HERE, "served_architectures.py"),
                           "check", src, os.path.join(ROOT, SERVED_TSV)],
                          capture_output=True, text=True, check=False)
    sys.stdout.write(proc.stdout)
    sys.stderr.write(proc.stderr)
    return proc.returncode == 0
