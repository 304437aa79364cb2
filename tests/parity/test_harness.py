"""Unit tests for the harness's own parsers (run by scripts/parity.sh before the comparison)."""

import ast
import contextlib
import io
import os
import random
import sys
import tempfile
import textwrap
import threading
import types
import unittest

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))

import cache_args  # noqa: E402
import draft_geometry  # noqa: E402
import handshake  # noqa: E402
import pd_args  # noqa: E402
import rule_messages  # noqa: E402
import run  # noqa: E402
from compare import arg_checks, classification, common  # noqa: E402
import served_architectures  # noqa: E402
import server_cli  # noqa: E402
import tree_cache  # noqa: E402
from releases import version_key  # noqa: E402


class ServedArchitecturesTest(unittest.TestCase):
    def release(self, files):
        root = tempfile.mkdtemp(prefix="parity-test-")
        self.addCleanup(lambda: __import__("shutil").rmtree(root, ignore_errors=True))
        for rel_path, text in files.items():
            path = os.path.join(root, "0.0.1", "sglang", "srt", rel_path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))
        return root

    def test_reads_single_classes_lists_aliases_and_imports(self):
        root = self.release({
            "models/a.py": "class A: pass\nEntryClass = A\n",
            "models/b.py": "class B: pass\nclass C: pass\nEntryClass = [B, C]\n",
            "models/alias.py": "class Real: pass\nShown = Real\nEntryClass = Shown\n",
            "models/reexport.py": ("from sglang.srt.models.pkg.impl import Impl as Local\n"
                                   "EntryClass = [Local]\n"),
            "models/pkg/impl.py": "class Impl: pass\nEntryClass = Impl\n",
            "models/none.py": "class Helper: pass\n",
        })
        # Sub-packages are skipped as SGLang's registry skips them; aliases resolve to __name__.
        self.assertEqual(served_architectures.served_by_release(root, "0.0.1"),
                         {"A", "B", "C", "Real", "Impl"})

    def test_byte_order_mark_is_accepted(self):
        root = self.release({"models/bom.py": "\ufeffclass X: pass\nEntryClass = X\n"})
        self.assertEqual(served_architectures.served_by_release(root, "0.0.1"), {"X"})

    def test_unknown_forms_are_refused_with_the_file(self):
        for text in ("import os\nif os.environ.get('X'):\n    EntryClass = []\n",
                     "class A: pass\nEntryClass = [A]\nEntryClass.append(A)\n",
                     "EntryClass = make_classes()\n"):
            root = self.release({"models/odd.py": text})
            with self.assertRaises(served_architectures.EntryClassError) as caught:
                served_architectures.served_by_release(root, "0.0.1")
            self.assertIn("odd.py", str(caught.exception))


class FieldFallbacksTest(unittest.TestCase):
    def test_reads_the_declared_fallback_of_resolvable_fields(self):
        srt = tempfile.mkdtemp(prefix="parity-test-")
        self.addCleanup(lambda: __import__("shutil").rmtree(srt, ignore_errors=True))
        os.makedirs(os.path.join(srt, "arg_groups", "fields"))
        with open(os.path.join(srt, "arg_groups", "fields", "schedule.py"), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent("""\
                class Fields:
                    swa_full_tokens_ratio: A[Optional[float], Arg(help="r", fallback=0.8)] = None
                    page_size: A[int, Arg(help="p")] = 1
                    computed: A[int, Arg(fallback=make())] = 0
                """))
        # Only literal fallbacks: a computed one is the release's business at run time.
        self.assertEqual(cache_args.field_fallbacks(srt), {"swa_full_tokens_ratio": 0.8})


class PipelineOrderTest(unittest.TestCase):
    def srt(self, files):
        srt = tempfile.mkdtemp(prefix="parity-test-")
        self.addCleanup(lambda: __import__("shutil").rmtree(srt, ignore_errors=True))
        for rel_path, text in files.items():
            path = os.path.join(srt, rel_path)
            os.makedirs(os.path.dirname(path), exist_ok=True)
            with open(path, "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))
        return srt

    def test_follows_the_pipeline_calls_not_the_imports(self):
        srt = self.srt({"arg_groups/pipeline.py": """\
            from hooks import (
                handle_hicache,
                handle_pd_disaggregation,
            )
            def run(server_args):
                run_hook(handle_pd_disaggregation, server_args)
                run_hook(handle_hicache_ratio_default, server_args)
                handle_cache_compatibility(server_args)
                run_hook(handle_hicache, server_args)
            """})
        steps = ["handle_hicache", "handle_cache_compatibility", "handle_pd_disaggregation"]
        self.assertEqual(cache_args.pipeline_order(srt, steps),
                         ["handle_pd_disaggregation", "handle_cache_compatibility", "handle_hicache"])

    def test_reads_post_init_method_calls_before_the_pipeline_existed(self):
        srt = self.srt({"server_args.py": """\
            class ServerArgs:
                def __post_init__(self):
                    self._handle_hicache()
                    self._handle_pd_disaggregation()
            """})
        self.assertEqual(cache_args.pipeline_order(srt, ["handle_pd_disaggregation", "handle_hicache"]),
                         ["handle_hicache", "handle_pd_disaggregation"])
        with self.assertRaises(SystemExit):
            cache_args.pipeline_order(srt, ["handle_cache_compatibility"])

    def test_unknown_flags_are_refused_with_their_values_as_argparse_lists_them(self):
        args = {"enable_unified_cache_external_linker": True,
                "disaggregation_decode_retraction_backup": "host_pool"}
        self.assertEqual(arg_checks.unrecognized(args, sorted(args)),
                         "unrecognized arguments: --disaggregation-decode-retraction-backup host_pool "
                         "--enable-unified-cache-external-linker")


def _row(strings, nargs="-", value_type="str", choices="-"):
    return (strings, "store" if nargs != "0" else "store_true", nargs, value_type, choices, "-", "-")


class ServerCliTableTest(unittest.TestCase):
    def test_rows_span_releases_and_keep_each_release_order(self):
        a, b, c = _row("--a"), _row("--b"), _row("--c", "0")
        # --c moves after --b in the newer release: it becomes two rows, so one order keeps both.
        rows = {"0.0.1": [a, c, b], "0.0.2": [a, b, c]}
        lines = [line.split("\t") for line in server_cli.render(rows).splitlines()
                 if not line.startswith("#")]
        self.assertEqual([(line[0], line[-2], line[-1]) for line in lines],
                         [("--a", "0.0.1", "-"), ("--c", "0.0.1", "0.0.1"), ("--b", "0.0.1", "-"),
                          ("--c", "0.0.2", "-")])

    def test_a_gap_in_a_range_is_refused(self):
        a, b = _row("--a"), _row("--b")
        with self.assertRaises(server_cli.TableError):
            server_cli.render({"0.0.1": [a, b], "0.0.2": [a], "0.0.3": [a, b]})

    def test_the_corpus_covers_every_kind_of_case(self):
        rows = {"0.0.1": [_row("--model-path --model"), _row("--tp-size", value_type="int"),
                          _row("--tp-offset", value_type="int"), _row("--gone", "0")],
                "0.0.2": [_row("--model-path --model"), _row("--tp-size", value_type="int"),
                          _row("--mode", choices='["a","b"]'), _row("--fn", value_type="~loads")]}
        cases = server_cli.corpus(rows, "0.0.2")
        argvs = {(c["subject"], " ".join(c["argv"][2:])) for c in cases}
        for expected in [("valid", "--tp-size 2"), ("invalid", "--tp-size two"), ("equals", "--tp-size=2"),
                         ("missing value", "--tp-size"), ("abbreviation", "--tp 2"),
                         ("ambiguous prefix", "--mod"),
                         ("invalid", "--mode not-a-choice"), ("removed or added (in 0.0.1)", "--gone"),
                         ("missing value", "--fn")]:
            self.assertIn(expected, argvs)
        self.assertNotIn(("valid", "--fn x"), argvs, "a type kvpilot does not judge gets no value")
        self.assertIn(("required missing", ""), {(c["subject"], " ".join(c["argv"])) for c in cases})


class VersionKeyTest(unittest.TestCase):
    def test_orders_numerically_with_post_releases_after_their_base(self):
        versions = ["0.5.9", "0.5.10", "0.5.10.post1", "0.5.10.post2", "0.5.23", "0.6.0"]
        for _ in range(50):
            shuffled = random.sample(versions, len(versions))
            self.assertEqual(sorted(shuffled, key=version_key), versions)


class ServedRangeTest(unittest.TestCase):
    def test_first_and_last_are_inclusive_and_dash_is_open(self):
        served = {"Old": ("0.5.17", "0.5.19"), "New": ("0.5.21", None)}
        self.assertTrue(classification.is_served(served, "Old", "0.5.19"))
        self.assertFalse(classification.is_served(served, "Old", "0.5.20"))
        self.assertFalse(classification.is_served(served, "New", "0.5.20"))
        self.assertTrue(classification.is_served(served, "New", "0.5.99"))
        self.assertFalse(classification.is_served(served, "Unknown", "0.5.23"))

    def test_the_committed_file_parses(self):
        served = classification.served_architectures()
        self.assertIn("LlamaForCausalLM", served)
        self.assertTrue(all(first.count(".") >= 2 for first, _ in served.values()))


class MessageTextTest(unittest.TestCase):
    def test_prefix_stops_at_the_first_interpolation(self):
        def prefix(expression):
            return pd_args._message_prefix(ast.parse(expression, mode="eval").body)

        self.assertEqual(prefix('"a" "b"'), "ab")
        self.assertEqual(prefix('f"got {x} and" "more"'), "got ")
        self.assertEqual(prefix('"head: " + ", ".join(x)'), "head: ")
        self.assertEqual(prefix('f"{x} first"'), "")

    def test_string_constants_join_split_messages(self):
        with tempfile.NamedTemporaryFile("w", suffix=".py", delete=False) as f:
            f.write('raise ValueError(\n    "first half, "\n    f"second {x} half"\n)\n')
        self.addCleanup(os.unlink, f.name)
        self.assertIn("first half, second {} half", rule_messages._string_constants(f.name))


class DraftGeometryTest(unittest.TestCase):
    UTILS = """\
        def setup_state_kv_args(kv_args, token_to_kv_pool, draft_token_to_kv_pool=None):
            from somewhere import DeepSeekV4TokenToKVPool
            if not token_to_kv_pool:
                return
            if isinstance(token_to_kv_pool, DeepSeekV4TokenToKVPool) and isinstance(
                draft_token_to_kv_pool, DeepSeekV4TokenToKVPool
            ):
                target = (token_to_kv_pool.page_size, token_to_kv_pool.sliding_window)
                draft = (draft_token_to_kv_pool.page_size, draft_token_to_kv_pool.sliding_window)
                if target != draft:
                    raise RuntimeError(f"geometry: target={target}, draft={draft}")
                ptrs, lens, item_lens = draft_token_to_kv_pool.get_state_buf_infos()
                if ptrs:
                    append_state_component(kv_args, StateType.SWA, ptrs, lens, item_lens)
        """

    def srt(self, utils):
        srt = tempfile.mkdtemp(prefix="parity-test-")
        self.addCleanup(lambda: __import__("shutil").rmtree(srt, ignore_errors=True))
        os.makedirs(os.path.join(srt, "disaggregation"))
        with open(os.path.join(srt, draft_geometry.UTILS), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(utils))
        return srt

    def run_statement(self, srt, target, draft):
        code, names = draft_geometry.dsv4_draft_statement(srt)
        self.assertEqual(names, ["DeepSeekV4TokenToKVPool", "draft_token_to_kv_pool",
                                 "isinstance", "token_to_kv_pool"])
        exec(code, {"token_to_kv_pool": target, "draft_token_to_kv_pool": draft,
                    "DeepSeekV4TokenToKVPool": draft_geometry.DeepSeekV4PoolStandIn,
                    "kv_args": None})

    def test_runs_only_the_draft_statement_with_stand_in_pools(self):
        srt = self.srt(self.UTILS)
        pool = draft_geometry.DeepSeekV4PoolStandIn
        # Same geometry: passes, and the empty buffer infos never reach append_state_component.
        self.run_statement(srt, pool(page_size=256, sliding_window=128),
                           pool(page_size=256, sliding_window=128))
        with self.assertRaises(RuntimeError) as caught:
            self.run_statement(srt, pool(page_size=256, sliding_window=128),
                               pool(page_size=512, sliding_window=128))
        self.assertEqual(str(caught.exception), "geometry: target=(256, 128), draft=(512, 128)")
        # A draft pool of another family skips the statement.
        self.run_statement(srt, pool(page_size=256, sliding_window=128),
                           draft_geometry.OtherPoolStandIn(page_size=1))

    def test_a_release_without_the_statement_is_refused(self):
        srt = self.srt("def setup_state_kv_args(kv_args, token_to_kv_pool):\n    pass\n")
        with self.assertRaises(SystemExit) as caught:
            draft_geometry.dsv4_draft_statement(srt)
        self.assertIn("found 0", str(caught.exception))

    def test_branches_keep_only_the_named_assignments(self):
        statement = ast.parse(textwrap.dedent("""\
            if self.is_draft_worker:
                from m import R
                ratios = [R] * n
                sources = []
            else:
                ratios = config.ratios
                sources = list(config.missing)
            """)).body[0]
        kept = draft_geometry._only(statement, lambda s: isinstance(s, ast.ImportFrom)
                                    or draft_geometry._assigns(s, "ratios"))
        self.assertNotIn("sources", ast.unparse(kept))
        self.assertIn("from m import R", ast.unparse(kept))


class FirstRefusalTest(unittest.TestCase):
    def test_sglang_s_one_message_must_be_among_kvpilot_s_and_silence_matches_silence(self):
        scenarios = [{"id": i} for i in "abcd"]
        theirs = {"a": {"message": "P1"}, "b": {"message": None}, "c": {"message": "P2"},
                  "d": {"message": None}}
        violation = lambda rule, message: {"rule": rule, "message": message, "phase": "handshake"}
        reports = {"a": {"violations": [violation("P1", "P1"), violation("P6", "P6")]},
                   "b": {"violations": []},
                   "c": {"violations": [violation("P6", "P6")]},
                   "d": {"violations": [violation("P5", "P5")]}}
        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            agreements, failed, rules = common.compare_first_refusal(
                scenarios, theirs, reports, lambda v: v["phase"] == "handshake", lambda s: s["id"])
        self.assertEqual((agreements, failed, rules), (2, 2, "P1 1"))
        self.assertEqual(printed.getvalue().splitlines(), [
            "  c: SGLang 'P2', kvpilot ['P6']", "  d: SGLang None, kvpilot ['P5']"])


class TreeCacheTest(unittest.TestCase):
    REGISTRY = """\
        def default_radix_cache_factory(ctx):
            if ctx.disable_radix_cache:
                from sglang.srt.mem_cache.chunk_cache import ChunkCache
                return ChunkCache(ctx.params)
            from sglang.srt.mem_cache.lmc import LMCacheUnifiedRadixCache
            if ctx.lmcache:
                return LMCacheUnifiedRadixCache(ctx.params)
            if ctx.flexkv:
                from sglang.srt.mem_cache.storage.flexkv import _flexkv_factory
                return _flexkv_factory(ctx)
            from sglang.srt.mem_cache.unified_cache.components import ComponentType
            from sglang.srt.mem_cache.unified_radix_cache import UnifiedRadixCache
            ctx.params.tree_components = (ComponentType.FULL,) + ((ComponentType.MAMBA,) if ctx.ssm else ())
            return UnifiedRadixCache(ctx.params)

        def create_tree_cache(ctx, name):
            if name:
                raise ValueError("not registered")
            else:
                cache = default_radix_cache_factory(ctx)
            if get_memory().enable_session_radix_cache and not getattr(
                cache, "enable_session_radix_cache", False
            ):
                raise ValueError(f"session needs the unified tree, got {type(cache).__name__}")
            if get_memory().wrap:
                cache = Wrapper(cache)
            if ctx.ssm and not cache.supports_mamba():
                raise NotImplementedError(f"mamba needs the unified tree, got {type(cache).__name__}")
            return cache
        """
    FILES = {
        "lmc.py": "class LMCacheUnifiedRadixCache(UnifiedRadixCache):\n    pass\n",
        "storage/flexkv/__init__.py": ("def _flexkv_factory(ctx):\n"
                                       "    from sglang.srt.mem_cache.storage.flexkv.radix import FlexKVRadixCache\n"
                                       "    return FlexKVRadixCache(ctx.params)\n"),
        "storage/flexkv/radix.py": "class FlexKVRadixCache(RadixCache):\n    pass\n",
    }

    def test_runs_the_checks_after_the_build_on_the_tree_each_stand_in_class_stands_for(self):
        srt = os.path.join(tempfile.mkdtemp(prefix="parity-test-"), "sglang", "srt")
        self.addCleanup(lambda: __import__("shutil").rmtree(os.path.dirname(os.path.dirname(srt)),
                                                            ignore_errors=True))
        os.makedirs(os.path.join(srt, "mem_cache", "storage", "flexkv"))
        with open(os.path.join(srt, "mem_cache", "registry.py"), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(self.REGISTRY))
        for name, text in self.FILES.items():
            with open(os.path.join(srt, "mem_cache", name), "w", encoding="utf-8") as f:
                f.write(text)
        tree = tree_cache._parse(os.path.join(srt, "mem_cache", "registry.py"))
        classes = tree_cache.cache_classes(srt, tree)
        self.assertEqual(classes, {
            ("sglang.srt.mem_cache.chunk_cache", "ChunkCache"): ("cache", False),
            ("sglang.srt.mem_cache.lmc", "LMCacheUnifiedRadixCache"): ("cache", True),
            ("sglang.srt.mem_cache.storage.flexkv", "_flexkv_factory"): ("factory", ("FlexKVRadixCache", False)),
            ("sglang.srt.mem_cache.unified_cache.components", "ComponentType"): ("other", None),
            ("sglang.srt.mem_cache.unified_radix_cache", "UnifiedRadixCache"): ("cache", True),
        })
        attached = []
        made = tree_cache.install_stand_ins(classes, types.SimpleNamespace(attach=attached.append))
        code, statements = tree_cache.checks(srt, tree)
        # The session and Mamba checks; not the backend lookup before the build, nor the wrapper.
        self.assertEqual(statements, 2)
        namespace = tree_cache.sglang_env.exec_subset(os.path.join(srt, "mem_cache", "registry.py"),
                                                      "sglang.srt.mem_cache.registry")
        namespace.update(made)
        memory = type("Memory", (), {"enable_session_radix_cache": False})()
        namespace["get_memory"] = lambda: memory
        for flexkv, session, ssm, refusal in (
                (False, False, True, None),
                (True, False, True, "mamba needs the unified tree, got FlexKVRadixCache"),
                (True, True, False, "session needs the unified tree, got FlexKVRadixCache"),
                (False, True, False, None)):
            memory.enable_session_radix_cache = session
            params = types.SimpleNamespace(enable_session_radix_cache=session, tree_components=None)
            ctx = types.SimpleNamespace(disable_radix_cache=False, lmcache=False, flexkv=flexkv, ssm=ssm,
                                        params=params)
            scope = dict(namespace, cache=namespace["default_radix_cache_factory"](ctx), ctx=ctx)
            if refusal:
                with self.assertRaises((ValueError, NotImplementedError)) as caught:
                    exec(code, scope)
                self.assertEqual(str(caught.exception), refusal)
            else:
                exec(code, scope)
        # Only the unified cache classes attach host pools.
        made["UnifiedRadixCache"](params=params).init_hicache(None, params)
        made["ChunkCache"](params).init_hicache(None, params)
        self.assertEqual(attached, [params])


class HostPoolsTest(unittest.TestCase):
    ASSEMBLER = """\
        class _DeepSeekV4Strategy:
            def matches(self, kvcache, components):
                from sglang.srt.mem_cache.deepseek_v4_memory_pool import DeepSeekV4TokenToKVPool
                return isinstance(kvcache, DeepSeekV4TokenToKVPool) and components == {
                    ComponentType.FULL, ComponentType.SWA}

        class _PlainStrategy:
            def matches(self, kvcache, components):
                return True

        _STRATEGIES = [{first}]

        def _deepseek_v4_num_host_pages(*, params, kvcache, page_size, swa_page_size):
            pages = params.token_to_kv_pool_allocator.size_full // page_size
            if get_memory().hicache_size > 0:
                raise ValueError("no --hicache-size")
            return int(pages * get_memory().hicache_ratio)
        """

    def host_pools(self, first):
        srt = os.path.join(tempfile.mkdtemp(prefix="parity-test-"), "sglang", "srt")
        self.addCleanup(lambda: __import__("shutil").rmtree(os.path.dirname(os.path.dirname(srt)),
                                                            ignore_errors=True))
        os.makedirs(os.path.dirname(os.path.join(srt, tree_cache.ASSEMBLER)))
        with open(os.path.join(srt, tree_cache.ASSEMBLER), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(self.ASSEMBLER).replace("{first}", first))
        release = types.SimpleNamespace(mc={"is_deepseek_v4": lambda hf_config: hf_config == "V4"})
        return tree_cache.HostPools(srt, release)

    def test_the_deepseek_v4_strategy_refuses_a_size_for_its_pool_only(self):
        pools = self.host_pools("_DeepSeekV4Strategy(), _PlainStrategy()")
        swa = types.SimpleNamespace(tree_components=("FULL", "SWA"))
        for model, size, components, refused in (("V4", 8, swa, True), ("V4", 0, swa, False),
                                                 ("V3", 8, swa, False),
                                                 ("V4", 8, types.SimpleNamespace(tree_components=("FULL",)), False)):
            arguments = tree_cache.Arguments({"hicache_size": size, "hicache_ratio": None})
            pools.prepare(types.SimpleNamespace(hf_config=model), arguments)
            if refused:
                with self.assertRaises(tree_cache.HostPoolRefusal) as caught:
                    pools.attach(components)
                self.assertEqual(str(caught.exception), "no --hicache-size")
            else:
                pools.attach(components)

    def test_a_release_whose_first_strategy_is_another_is_refused(self):
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            self.host_pools("_PlainStrategy(), _DeepSeekV4Strategy()")


class DraftRunnersTest(unittest.TestCase):
    TP_WORKER = """\
        class TpModelWorker:
            def _init_multi_layer_eagle_model_runners(self):
                from sglang.srt.model_executor.model_runner import ModelRunner

                self.model_runner_list.append(self.model_runner)
                for i in range(1, get_spec().speculative_num_steps):
                    self.model_runner_list.append(ModelRunner(draft_model_idx=i))

            @property
            def model_runner(self):
                return self._model_runner
        """
    HOOK = """\
        def _auto_choose_speculative_params(server_args, model_arch):
            cfg = resolving_view(server_args)
            if model_arch == "LlamaForCausalLM":
                return (5, 4, 8)
            return (3, 1, 4)
        """

    def draft_runners(self, tp_worker):
        srt = os.path.join(tempfile.mkdtemp(prefix="parity-test-"), "sglang", "srt")
        self.addCleanup(lambda: __import__("shutil").rmtree(os.path.dirname(os.path.dirname(srt)),
                                                            ignore_errors=True))
        for path, text in ((tree_cache.TP_WORKER, tp_worker), (pd_args.SPECULATIVE_HOOK, self.HOOK)):
            os.makedirs(os.path.dirname(os.path.join(srt, path)), exist_ok=True)
            with open(os.path.join(srt, path), "w", encoding="utf-8") as f:
                f.write(textwrap.dedent(text))
        return tree_cache.DraftRunners(srt, release=None)

    def test_the_release_s_worker_builds_one_runner_per_step_and_its_own_step_count(self):
        runners = self.draft_runners(self.TP_WORKER)
        self.assertEqual([len(runners.built_runners(steps)) for steps in (0, 1, 2, 5)], [1, 1, 2, 5])
        self.assertEqual(runners.auto_steps("EAGLE", "LlamaForCausalLM"), 5)
        self.assertEqual(runners.auto_steps("EAGLE3", "MiMoV2FlashForCausalLM"), 3)
        # The stand-in ModelRunner module is gone after the count.
        self.assertNotIn(tree_cache.MODEL_RUNNER_MODULE, sys.modules)

    def test_a_release_without_the_multi_layer_runners_is_refused(self):
        runners = self.draft_runners("class TpModelWorker:\n    pass\n")
        with contextlib.redirect_stderr(io.StringIO()), self.assertRaises(SystemExit):
            runners.built_runners(2)


class AfterBuildTest(unittest.TestCase):
    BUILDER = """\
        def build(enable_hierarchical_cache, retraction_backup, hicache_draft_plan):
            tree_context = object()
            with auto_size_hicache():
                tree_cache = create_tree_cache(tree_context)
                if enable_hierarchical_cache and hicache_draft_plan is not None:
                    maybe_register_hicache_draft(tree_cache=tree_cache, draft_plan=hicache_draft_plan)
            if tree_cache is None:
                log("no tree")
            if retraction_backup == "host_pool":
                if not isinstance(tree_cache, UnifiedRadixCache):
                    raise ValueError("host_pool needs the unified tree")
            return tree_cache
        """

    def test_takes_the_draft_registration_and_the_host_pool_check_after_the_build(self):
        srt = os.path.join(tempfile.mkdtemp(prefix="parity-test-"), "sglang", "srt")
        self.addCleanup(lambda: __import__("shutil").rmtree(os.path.dirname(os.path.dirname(srt)),
                                                            ignore_errors=True))
        os.makedirs(os.path.join(srt, "mem_cache"))
        with open(os.path.join(srt, tree_cache.BUILDER), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent(self.BUILDER))
        code, statements = tree_cache.after_build(srt)
        self.assertEqual(statements, 2)
        registered = []
        unified = type("UnifiedRadixCache", (), {})
        scope = {"maybe_register_hicache_draft": lambda **kwargs: registered.append(kwargs),
                 "UnifiedRadixCache": unified, "tree_cache": object(), "enable_hierarchical_cache": True,
                 "hicache_draft_plan": "plan", "retraction_backup": "host_pool"}
        with self.assertRaises(ValueError):
            exec(code, dict(scope))
        self.assertEqual(registered[0]["draft_plan"], "plan")
        exec(code, dict(scope, tree_cache=unified(), retraction_backup="cpu_tensor"))


class HandshakeTest(unittest.TestCase):
    def test_a_global_the_handshake_reads_that_is_not_bound_is_named(self):
        srt = os.path.join(tempfile.mkdtemp(prefix="parity-test-"), "sglang", "srt")
        self.addCleanup(lambda: __import__("shutil").rmtree(os.path.dirname(os.path.dirname(srt)),
                                                            ignore_errors=True))
        os.makedirs(os.path.join(srt, "disaggregation", "common"))
        with open(os.path.join(srt, "disaggregation", "common", "conn.py"), "w", encoding="utf-8") as f:
            f.write(textwrap.dedent("""\
                class CommonKVManager:
                    def try_ensure_parallel_info(self, addr):
                        info = requests.get(addr)
                        if [st for st in info.states if st in (StateType.SWA,)]:
                            raise RuntimeError(new_helper(info))
                    def _resolve_rank_mapping(self, info):
                        logger.debug(info)
                """))
        self.assertEqual(handshake.handshake_names(srt, {"requests": None, "logger": None,
                                                         "StateType": None}), ["new_helper"])


class ReleaseWorkersTest(unittest.TestCase):
    def test_each_release_prints_whole_and_in_release_order_whatever_finishes_first(self):
        later_done = threading.Event()

        def check(release):
            print(f"{release} first line")
            if release == "0.5.17":
                # The earlier release waits until the later one has finished and printed.
                self.assertTrue(later_done.wait(5))
            print(f"{release} last line")
            if release == "0.5.18":
                later_done.set()
            return release.upper()

        printed = io.StringIO()
        with contextlib.redirect_stdout(printed):
            with run.ReleaseWorkers(2) as workers:
                print("before")
                results = list(workers.map(check, ["0.5.17", "0.5.18"]))
            print("after")
        self.assertEqual(results, ["0.5.17", "0.5.18"])
        self.assertEqual(printed.getvalue().splitlines(), [
            "before", "0.5.17 first line", "0.5.17 last line", "0.5.18 first line", "0.5.18 last line",
            "after"])

    def test_a_failing_release_raises_in_the_driver(self):
        def check(release):
            raise RuntimeError(f"{release} broke")

        with run.ReleaseWorkers(2) as workers, self.assertRaisesRegex(RuntimeError, "0.5.17 broke"):
            list(workers.map(check, ["0.5.17", "0.5.18"]))


if __name__ == "__main__":
    unittest.main()
