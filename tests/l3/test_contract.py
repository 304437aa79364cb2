"""The connector and sidecar driven by one SGLang release's own code, on CPU.

SGLang builds the host KV pool (shm allocator, pin_memory off) and the backend (its
`StorageBackendFactory`, "dynamic"); its controller's storage methods run the backup
(`_page_backup` → `batch_set_v1`), the hit query (`_storage_hit_query` → `batch_exists`) and the
transfer (`_page_transfer` → `batch_get_v1`) with its batching of at most 128 pages. Every page
must come back byte for byte.

Run with SGLang's source on PYTHONPATH, plus python/ and tests/l3/, and KVPILOT_BIN set
(scripts/l3-contract.sh does this for each release).
"""

from __future__ import annotations

import random
import socket
import time
import unittest
from unittest import mock

import sglang_harness as h
from kvpilot_sglang import wire
from sidecar import Sidecar

PAGE = 16
PAGES = 200  # two batches: 128 + 72


def tokens(count: int, seed: int) -> list:
    rng = random.Random(seed)
    return [rng.randrange(0, 150_000) for _ in range(count)]


class Contract(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.sidecar = Sidecar().start()

    @classmethod
    def tearDownClass(cls):
        cls.sidecar.close()

    def backend(self, host, mla, tp_rank=0, tp_size=1, model="test-model", layout="page_first", **extra):
        config = h.storage_config({**h.KVPILOT_EXTRA, "socket": self.sidecar.socket, **extra}, mla, tp_rank, tp_size, model, layout)
        backend = h.create_backend("dynamic", config, host)
        self.addCleanup(backend.close)
        return backend

    def round_trip(self, mla: bool, layout: str, seed: int, zero_copy: bool = True, allocator: str = "shm", **extra):
        host = h.build_host_pool(mla, layout, page_size=PAGE, device_tokens=PAGES * PAGE, host_tokens=3 * PAGES * PAGE, allocator=allocator)
        h.randomize(host, seed)
        backend = self.backend(host, mla, layout=layout, model=f"model-{seed}", **extra)
        cc = h.controller(backend, host, zero_copy=zero_copy)
        ids = tokens(PAGES * PAGE, seed)
        src = host.alloc(PAGES * PAGE)
        self.assertEqual(h.backup(cc, src, ids), PAGES * PAGE)
        op, (hashes, hit_tokens) = h.hit_query(cc, ids)
        self.assertEqual(hit_tokens, PAGES * PAGE)
        dst = host.alloc(PAGES * PAGE)
        before = h.page_bytes(host, dst)
        self.assertEqual(h.transfer(cc, op, hashes, dst), PAGES)
        after = h.page_bytes(host, dst)
        self.assertEqual(after, h.page_bytes(host, src), "pages came back changed")
        self.assertNotEqual(before, after)
        self.assertEqual(backend.failure_counts()["errors"], 0)
        return backend

    def test_mha_page_first(self):
        backend = self.round_trip(False, "page_first", 1)
        self.assertIsNotNone(backend.pool_fd, "zero copy through the memfd")

    def test_mha_page_first_direct(self):
        backend = self.round_trip(False, "page_first_direct", 2)
        self.assertIsNotNone(backend.pool_fd)

    def test_mla_page_first(self):
        self.round_trip(True, "page_first", 3)

    def test_mla_page_first_direct(self):
        self.round_trip(True, "page_first_direct", 4)

    def test_v1_without_shm_moves_bytes_over_the_socket(self):
        backend = self.round_trip(False, "page_first", 5, allocator="default")
        self.assertIsNone(backend.pool_fd)

    def test_generic_interface_without_interface_v1(self):
        self.round_trip(False, "page_first", 6, zero_copy=False, interface_v1=0)
        self.round_trip(True, "page_first_direct", 7, zero_copy=False, interface_v1=0)

    def test_mha_tp_ranks_keep_their_own_shards(self):
        ids = tokens(8 * PAGE, 8)
        hosts, controllers = [], []
        for rank in range(2):
            host = h.build_host_pool(False, "page_first", page_size=PAGE)
            h.randomize(host, 80 + rank)
            cc = h.controller(self.backend(host, False, tp_rank=rank, tp_size=2, model="tp"), host, zero_copy=True)
            hosts.append(host)
            controllers.append(cc)
        sources = [host.alloc(8 * PAGE) for host in hosts]
        for cc, src in zip(controllers, sources):
            self.assertEqual(h.backup(cc, src, ids), 8 * PAGE)
        for rank, (host, cc, src) in enumerate(zip(hosts, controllers, sources)):
            op, (hashes, hit) = h.hit_query(cc, ids)
            self.assertEqual(hit, 8 * PAGE)
            dst = host.alloc(8 * PAGE)
            self.assertEqual(h.transfer(cc, op, hashes, dst), 8)
            self.assertEqual(h.page_bytes(host, dst), h.page_bytes(host, src), f"rank {rank} read another shard")

    def test_mla_pages_are_shared_and_only_the_writer_writes(self):
        ids = tokens(8 * PAGE, 9)
        hosts = [h.build_host_pool(True, "page_first", page_size=PAGE) for _ in range(2)]
        for rank, host in enumerate(hosts):
            h.randomize(host, 90 + rank)
        ccs = [h.controller(self.backend(host, True, tp_rank=rank, tp_size=2, model="mla-writer"), host, zero_copy=True) for rank, host in enumerate(hosts)]
        # Rank 1 is not the storage writer: its backup stores nothing.
        h.backup(ccs[1], hosts[1].alloc(8 * PAGE), ids)
        self.assertEqual(h.hit_query(ccs[1], ids)[1][1], 0)
        src = hosts[0].alloc(8 * PAGE)
        self.assertEqual(h.backup(ccs[0], src, ids), 8 * PAGE)
        # Rank 1 reads rank 0's pages: MLA pages are the same on every rank.
        op, (hashes, hit) = h.hit_query(ccs[1], ids)
        self.assertEqual(hit, 8 * PAGE)
        dst = hosts[1].alloc(8 * PAGE)
        self.assertEqual(h.transfer(ccs[1], op, hashes, dst), 8)
        self.assertEqual(h.page_bytes(hosts[1], dst), h.page_bytes(hosts[0], src))

    def test_models_and_layouts_never_read_each_others_pages(self):
        ids = tokens(4 * PAGE, 10)
        writer_host = h.build_host_pool(False, "page_first", page_size=PAGE)
        writer = h.controller(self.backend(writer_host, False, model="alpha"), writer_host, zero_copy=True)
        self.assertEqual(h.backup(writer, writer_host.alloc(4 * PAGE), ids), 4 * PAGE)
        for model, layout in (("beta", "page_first"), ("alpha", "page_first_direct")):
            host = h.build_host_pool(False, layout, page_size=PAGE)
            cc = h.controller(self.backend(host, False, model=model, layout=layout), host, zero_copy=True)
            self.assertEqual(h.hit_query(cc, ids)[1][1], 0, f"{model} {layout} saw alpha's pages")

    def test_a_corrupt_client_leaves_other_clients_pages_intact(self):
        host = h.build_host_pool(False, "page_first", page_size=PAGE)
        h.randomize(host, 13)
        cc = h.controller(self.backend(host, False, model="corrupt"), host, zero_copy=True)
        ids = tokens(8 * PAGE, 13)
        src = host.alloc(8 * PAGE)
        self.assertEqual(h.backup(cc, src, ids), 8 * PAGE)
        for garbage in (b"\x05\x00\x00\x00\x2a\x00\x00\x00\x00", b"\xff\xff\xff\xff", b"\x03\x00\x00\x00\x01\x01"):
            with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as raw:
                raw.connect(self.sidecar.socket)
                raw.sendall(garbage)
                raw.shutdown(socket.SHUT_WR)
                raw.settimeout(5)
                while raw.recv(4096):
                    pass  # the sidecar answers with a reason, then closes
        op, (hashes, hit) = h.hit_query(cc, ids)
        self.assertEqual(hit, 8 * PAGE)
        dst = host.alloc(8 * PAGE)
        self.assertEqual(h.transfer(cc, op, hashes, dst), 8)
        self.assertEqual(h.page_bytes(host, dst), h.page_bytes(host, src))
        self.assertGreaterEqual(self.sidecar.metric("kvpilot_cache_connections_closed_total"), 3)

    def test_clear_and_stats(self):
        backend = self.round_trip(False, "page_first", 11)
        stats = backend.get_stats()
        self.assertEqual(sum(stats.backup_pgs), PAGES)
        self.assertEqual(sum(stats.prefetch_pgs), PAGES)
        self.assertEqual(backend.get_stats().backup_pgs, [], "get_stats drains")
        backend.clear()
        self.assertEqual(backend.batch_exists(["x"]), 0)


class DeadSidecar(unittest.TestCase):
    """A sidecar killed mid-batch: SGLang's calls return misses and failed writes (never an
    exception), and after a restart on the same socket later batches hit again."""

    def test_kill_mid_batch_then_restart(self):
        sidecar = Sidecar().start()
        self.addCleanup(sidecar.close)
        host = h.build_host_pool(False, "page_first", page_size=PAGE, device_tokens=PAGES * PAGE, host_tokens=3 * PAGES * PAGE)
        h.randomize(host, 12)
        config = h.storage_config({**h.KVPILOT_EXTRA, "socket": sidecar.socket, "retry_interval": 0.2}, False)
        backend = h.create_backend("dynamic", config, host)
        self.addCleanup(backend.close)
        cc = h.controller(backend, host, zero_copy=True)
        ids = tokens(PAGES * PAGE, 12)
        src = host.alloc(PAGES * PAGE)

        # The sidecar dies in the middle of the second batch's frame: it has the frame's length
        # and opcode, and is killed before the rest arrives.
        sent = {"frames": 0}
        original_set = wire.Session.set

        def set_then_die(session, *args):
            sent["frames"] += 1
            if sent["frames"] == 2:
                send = session._send

                def send_half_then_die(parts):
                    send(parts[:2])
                    sidecar.kill()
                    send(parts[2:])

                session._send = send_half_then_die
            return original_set(session, *args)

        with mock.patch.object(wire.Session, "set", set_then_die):
            completed = h.backup(cc, src, ids)
        self.assertEqual(completed, 128 * PAGE, "SGLang stops at the failed batch")
        op, (hashes, hit) = h.hit_query(cc, ids)
        self.assertEqual(hit, 0, "a dead sidecar is a miss")
        self.assertEqual(backend.batch_get_v1(hashes or ["k"], host.alloc(PAGE)), [False])
        self.assertGreater(backend.failure_counts()["errors"], 0)

        sidecar.start()
        time.sleep(0.3)  # the connector's retry_interval
        self.assertEqual(h.backup(cc, src, ids), PAGES * PAGE)
        op, (hashes, hit) = h.hit_query(cc, ids)
        self.assertEqual(hit, PAGES * PAGE)
        dst = host.alloc(PAGES * PAGE)
        self.assertEqual(h.transfer(cc, op, hashes, dst), PAGES)
        self.assertEqual(h.page_bytes(host, dst), h.page_bytes(host, src))


if __name__ == "__main__":
    unittest.main()
