"""Rule messages per release, checked against each release's source (a static table, not an
executed check: these rules fire at pool build, handshake or transfer time, which needs a GPU).

Each row: rule id (docs/rules.md), a fragment of SGLang's message, the file under sglang/srt/,
and the first/last release that has it (None = open-ended). The fragment is looked for in the
file's string constants as Python joins them (implicit concatenation and f-string parts), so a
message split across source lines is still found. A row fails when the fragment is missing from
a release the table says has it, or present in one it says lacks it.
"""

import ast
import os

from releases import version_key

KVB = "mem_cache/kv_cache_builder.py"
PDH = "arg_groups/pd_disaggregation_hook.py"
MOONCAKE = "disaggregation/mooncake/conn.py"
NIXL = "disaggregation/nixl/conn.py"
MORI = "disaggregation/mori/conn.py"

RULES = [
    ("R13 (0.5.17-0.5.18 blanket SWA rule)",
     "--disaggregation-decode-enable-radix-cache is incompatible with sliding window attention "
     "(SWA) models", KVB, "0.5.17", "0.5.18"),
    ("R9b", "Retraction host pool is smaller than its device pool",
     "mem_cache/unified_radix_cache.py", "0.5.18", "0.5.18"),
    ("R19 DCP backend (mooncake or nixl)",
     "PD decode DCP requires --disaggregation-transfer-backend mooncake or nixl, got", PDH,
     "0.5.17", "0.5.18"),
    ("R19 DCP backend (+ fake)", "mooncake, nixl, or fake for synthetic benchmarking", PDH,
     "0.5.19", "0.5.21"),
    ("R19 DCP backend (+ mori, ascend)",
     "mooncake, nixl, mori, ascend, or fake for synthetic benchmarking", PDH, "0.5.22", None),
    ("N2", "--disaggregation-decode-host-receive-threshold must be between 0 and 1", PDH,
     "0.5.21", None),
    ("N7", "Transfer backend does not support decode host KV destinations", "disaggregation/decode.py",
     "0.5.21", None),
    ("L7", "LMCacheUnifiedRadixCache currently supports colocated prefill/decode scheduling only",
     "arg_groups/kv_cache_hook.py", "0.5.21", None),
    ("U5a", "Unified-memory H2D/D2H does not support host-pool decode retraction with decode "
     "radix cache yet.", KVB, "0.5.21", "0.5.21"),
    ("R15 (0.5.23 text)", "with DeepSeek-V4 requires the unified KV layout", KVB, "0.5.23", None),
    ("T1 mooncake/nixl text", "PD Disaggregation does NOT support PD different TP sizes for "
     "non-MLA", "disaggregation/mooncake/conn.py", "0.5.17", None),
    ("T1pp", "SWA hybrid models with pipeline parallelism yet", "disaggregation/common/conn.py",
     "0.5.22", None),
    ("T4 PP (sparse index text, mooncake)", "PD disagg: PP>1 not supported for MiniMax sparse index yet.",
     MOONCAKE, "0.5.17", "0.5.20"),
    ("T4 PP (state text, mooncake)", "PD disagg: PP>1 not supported for MiniMax state yet.", MOONCAKE,
     "0.5.21", None),
    ("T4 PP (sparse index text, nixl)", "PD disagg: PP>1 not supported for MiniMax sparse index yet.",
     NIXL, "0.5.17", "0.5.20"),
    ("T4 PP (state text, nixl)", "PD disagg: PP>1 not supported for MiniMax state yet.", NIXL,
     "0.5.21", None),
    ("T4 PP (mori)", "PD disagg: PP>1 not supported for MiniMax sparse index yet.", MORI, "0.5.17",
     "0.5.19"),
    ("T4 TP (sparse index text, mooncake)",
     "PD disagg: heterogeneous TP not supported for MiniMax sparse index yet.", MOONCAKE, "0.5.17",
     "0.5.20"),
    ("T4 TP (state text, mooncake)", "PD disagg: heterogeneous TP not supported for MiniMax state yet.",
     MOONCAKE, "0.5.21", None),
    ("T4 TP (sparse index text, nixl)",
     "PD disagg: heterogeneous TP not supported for MiniMax sparse index yet.", NIXL, "0.5.17",
     "0.5.20"),
    ("T4 TP (state text, nixl)", "PD disagg: heterogeneous TP not supported for MiniMax state yet.",
     NIXL, "0.5.21", None),
    ("T4 TP (mori)", "PD disagg: heterogeneous TP not supported for MiniMax sparse index yet.", MORI,
     "0.5.17", "0.5.19"),
    ("T5 PP (mori)", "MORI PD disaggregation requires PP=1 for {}; PP>1 needs peer state_layer_ids",
     MORI, "0.5.20", None),
    ("T5 TP (mori)", "PD disagg: heterogeneous TP not supported for {} yet.", MORI, "0.5.20", None),
    ("T4c", "MiniMax sparse PD requires matching attention TP sizes: prefill={}, decode={}.",
     "disaggregation/common/conn.py", "0.5.23", None),
    ("SD2", "DFLASH speculative decoding requires setting --speculative-draft-model-path.",
     "arg_groups/speculative_hook.py", "0.5.17", None),
    ("SD3", "Currently DFLASH speculative decoding only supports pp_size == 1.",
     "arg_groups/speculative_hook.py", "0.5.17", None),
    ("SD4", "UNO reuses the target model and does not accept --speculative-draft-model-path.",
     "arg_groups/speculative_hook.py", "0.5.20", None),
    ("T1hnd", "PD-disaggregation KV transfer assumes NHD slot-row layout; HND KV cache "
     "(SGLANG_USE_HND_KVCACHE) is not supported with disagg yet.", "mem_cache/memory_pool.py",
     "0.5.17", None),
]


# Names a function reads, for rules whose condition is a branch with no message of its own. Each
# row: rule id, the attribute name (`StateType.BLOCK_SCALE` reads `BLOCK_SCALE`), the file under
# sglang/srt/, the function (any class's), and the first/last release whose function reads it.
NAMES = [
    ("T1nx: MXFP8 pools register BLOCK_SCALE state", "BLOCK_SCALE", "disaggregation/utils.py",
     "setup_state_kv_args", "0.5.19", None),
    ("T1nx / T1 (nixl): NIXL's sender has a branch for BLOCK_SCALE state", "BLOCK_SCALE", NIXL,
     "maybe_send_extra", "0.5.21", None),
]


def _reads_name(path, function, name):
    with open(path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), path)
    functions = [node for node in ast.walk(tree)
                 if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)) and node.name == function]
    if not functions:
        raise SystemExit(f"{path}: {function} did not define")
    return any(isinstance(node, ast.Attribute) and node.attr == name
               for fn in functions for node in ast.walk(fn))


def _string_constants(path):
    with open(path, encoding="utf-8-sig") as f:
        tree = ast.parse(f.read(), path)
    texts = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Constant) and isinstance(node.value, str):
            texts.append(node.value)
        elif isinstance(node, ast.JoinedStr):
            texts.append("".join(v.value if isinstance(v, ast.Constant) else "{}"
                                 for v in node.values))
    return texts


def check(src, version):
    """(passed, failures) for one release's source tree."""
    srt = os.path.join(src, "sglang", "srt")
    cache = {}
    outcomes = []  # (as the table says, failure text)
    for rule, fragment, rel_path, first, last in RULES:
        path = os.path.join(srt, rel_path)
        if rel_path not in cache:
            cache[rel_path] = _string_constants(path) if os.path.exists(path) else []
        present = any(fragment in text for text in cache[rel_path])
        expected = _holds(version, first, last)
        outcomes.append((present == expected, f"{rule}: expected {'present' if expected else 'absent'} in "
                                              f"{rel_path}, found {'present' if present else 'absent'}"))
    for rule, name, rel_path, function, first, last in NAMES:
        reads = _reads_name(os.path.join(srt, rel_path), function, name)
        expected = _holds(version, first, last)
        outcomes.append((reads == expected, f"{rule}: expected {function} in {rel_path} "
                                            f"{'to read' if expected else 'not to read'} {name}, it "
                                            f"{'does' if reads else 'does not'}"))
    failures = [text for agrees, text in outcomes if not agrees]
    return len(outcomes) - len(failures), failures


def _holds(version, first, last):
    """Whether `version` is within first..last (last None: open-ended)."""
    return version_key(first) <= version_key(version) and (last is None or version_key(version) <= version_key(last))
