//! `kvpilot cache-runtime` over real Unix sockets in a temporary directory: pages round-trip
//! through a memfd host pool, bad clients (malformed frames, a wrong fd, regions outside the
//! mapping, a client dying mid-frame) lose only their own connection, eviction is whole pages,
//! and a killed sidecar comes back on the same socket. Every sidecar is killed on drop, so a
//! failing test stops it too.

use std::io::{IoSlice, Read, Write};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::os::fd::{AsFd, OwnedFd};
use std::os::unix::fs::FileExt;
use std::os::unix::net::UnixStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use kvpilot::runtime::protocol::{VERSION, encode_keys};
use rustix::net::{SendAncillaryBuffer, SendAncillaryMessage, SendFlags};

const PAGE: u64 = 4096;

struct Sidecar {
    child: Child,
    socket: PathBuf,
    metrics: SocketAddr,
    log: PathBuf,
}

impl Sidecar {
    fn start(dir: &Path, capacity: &str) -> Self {
        let metrics = {
            let probe = TcpListener::bind("127.0.0.1:0").unwrap();
            probe.local_addr().unwrap()
        };
        let socket = dir.join("cache.sock");
        let log = dir.join("sidecar.log");
        let child = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
            .args(["cache-runtime", "--capacity", capacity, "--socket"])
            .arg(&socket)
            .args(["--metrics-addr", &metrics.to_string()])
            .stdout(Stdio::null())
            .stderr(std::fs::File::create(&log).unwrap())
            .spawn()
            .expect("start kvpilot cache-runtime");
        let sidecar = Self { child, socket, metrics, log };
        let deadline = Instant::now() + Duration::from_secs(20);
        while sidecar.http("/readyz").is_none_or(|body| !body.starts_with("HTTP/1.1 200")) || !sidecar.socket.exists() {
            assert!(Instant::now() < deadline, "the sidecar did not become ready");
            std::thread::sleep(Duration::from_millis(20));
        }
        sidecar
    }

    fn http(&self, path: &str) -> Option<String> {
        let mut stream = TcpStream::connect(self.metrics).ok()?;
        write!(stream, "GET {path} HTTP/1.1\r\nHost: x\r\nConnection: close\r\n\r\n").ok()?;
        let mut response = String::new();
        stream.read_to_string(&mut response).ok()?;
        Some(response)
    }

    /// Sum of a metric's samples over its label sets.
    fn metric(&self, name: &str) -> f64 {
        let body = self.http("/metrics").expect("metrics");
        body.lines()
            .filter(|line| line.starts_with(&format!("{name} ")) || line.starts_with(&format!("{name}{{")))
            .map(|line| line.rsplit(' ').next().unwrap().parse::<f64>().unwrap())
            .sum()
    }

    fn log(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    /// The process's resident memory, from /proc.
    fn rss_bytes(&self) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id())).unwrap();
        let line = status.lines().find(|l| l.starts_with("VmRSS:")).unwrap();
        line.split_whitespace().nth(1).unwrap().parse::<u64>().unwrap() * 1024
    }

    fn kill(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for Sidecar {
    fn drop(&mut self) {
        self.kill();
    }
}

/// A host pool: a memfd of `pages` pages, as SGLang's shm allocator makes one.
struct Pool {
    file: std::fs::File,
    pages: u64,
}

impl Pool {
    fn new(pages: u64) -> Self {
        let fd = rustix::fs::memfd_create("test_host_pool", rustix::fs::MemfdFlags::CLOEXEC).unwrap();
        rustix::fs::ftruncate(&fd, pages * PAGE).unwrap();
        Self { file: std::fs::File::from(fd), pages }
    }

    fn fill(&self, page: u64, seed: u8) {
        let bytes: Vec<u8> = (0..PAGE).map(|i| (i as u8).wrapping_mul(31).wrapping_add(seed)).collect();
        self.file.write_all_at(&bytes, page * PAGE).unwrap();
    }

    fn page(&self, page: u64) -> Vec<u8> {
        let mut bytes = vec![0; PAGE as usize];
        self.file.read_exact_at(&mut bytes, page * PAGE).unwrap();
        bytes
    }
}

struct Client {
    stream: UnixStream,
}

fn frame(body: &[u8]) -> Vec<u8> {
    let mut out = (body.len() as u32).to_le_bytes().to_vec();
    out.extend_from_slice(body);
    out
}

fn hello_body(namespace: &str, pool_bytes: u64) -> Vec<u8> {
    let mut body = vec![1];
    body.extend_from_slice(&VERSION.to_le_bytes());
    body.extend_from_slice(&(namespace.len() as u16).to_le_bytes());
    body.extend_from_slice(namespace.as_bytes());
    body.extend_from_slice(&pool_bytes.to_le_bytes());
    body
}

/// A SET (op 4) or GET (op 3) of one region per page: key i ↔ pool page `pages[i]`.
fn regions_body(op: u8, keys: &[&str], pages: &[u64]) -> Vec<u8> {
    let mut body = vec![op];
    encode_keys(&keys.iter().map(|k| k.as_bytes()).collect::<Vec<_>>(), &mut body);
    body.push(1);
    pages.iter().for_each(|page| body.extend_from_slice(&(page * PAGE).to_le_bytes()));
    pages.iter().for_each(|_| body.extend_from_slice(&PAGE.to_le_bytes()));
    body
}

impl Client {
    fn connect(socket: &Path) -> Self {
        Self { stream: UnixStream::connect(socket).expect("connect to the sidecar") }
    }

    /// HELLO with `fd` attached (SCM_RIGHTS), as the connector's `socket.send_fds` does.
    fn send_with_fd(&mut self, body: &[u8], fd: impl AsFd) {
        let fds = [fd.as_fd()];
        let mut space = [std::mem::MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(1))];
        let mut control = SendAncillaryBuffer::new(&mut space);
        assert!(control.push(SendAncillaryMessage::ScmRights(&fds)));
        let bytes = frame(body);
        let sent =
            rustix::net::sendmsg(&self.stream, &[IoSlice::new(&bytes)], &mut control, SendFlags::empty()).unwrap();
        assert_eq!(sent, bytes.len());
    }

    fn hello(socket: &Path, namespace: &str, pool: &Pool) -> Self {
        let mut client = Self::connect(socket);
        client.send_with_fd(&hello_body(namespace, pool.pages * PAGE), &pool.file);
        assert_eq!(client.reply().unwrap(), (0, vec![]));
        client
    }

    fn reply(&mut self) -> std::io::Result<(u8, Vec<u8>)> {
        let mut header = [0u8; 4];
        self.stream.read_exact(&mut header)?;
        let mut body = vec![0; u32::from_le_bytes(header) as usize];
        self.stream.read_exact(&mut body)?;
        Ok((body[0], body[1..].to_vec()))
    }

    fn request(&mut self, body: &[u8]) -> std::io::Result<(u8, Vec<u8>)> {
        self.stream.write_all(&frame(body))?;
        self.reply()
    }

    fn set(&mut self, keys: &[&str], pages: &[u64]) -> Vec<u8> {
        let (status, map) = self.request(&regions_body(4, keys, pages)).unwrap();
        assert_eq!(status, 0, "{}", String::from_utf8_lossy(&map));
        map
    }

    fn get(&mut self, keys: &[&str], pages: &[u64]) -> Vec<u8> {
        let (status, map) = self.request(&regions_body(3, keys, pages)).unwrap();
        assert_eq!(status, 0, "{}", String::from_utf8_lossy(&map));
        map
    }

    /// The sidecar refuses the frame with a reason, then closes the connection.
    fn refused(mut self, body: &[u8]) -> String {
        let (status, reason) = self.request(body).expect("a refusal reply");
        assert_eq!(status, 1);
        let mut rest = Vec::new();
        assert_eq!(self.stream.read_to_end(&mut rest).unwrap(), 0, "the connection is closed after a refusal");
        String::from_utf8(reason).unwrap()
    }
}

#[test]
fn bad_clients_lose_only_their_own_connection() {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = Sidecar::start(dir.path(), "64MiB");
    let pool = Pool::new(16);
    for page in 0..4 {
        pool.fill(page, page as u8 + 1);
    }
    let mut good = Client::hello(&sidecar.socket, "model-a", &pool);
    assert_eq!(good.set(&["k0", "k1", "k2", "k3"], &[0, 1, 2, 3]), [1, 1, 1, 1]);

    let other = Pool::new(4);
    let reasons = [
        Client::hello(&sidecar.socket, "model-a", &other).refused(&[42]),
        Client::hello(&sidecar.socket, "model-a", &other).refused(&[2, 1, 0, 0, 0]),
        Client::hello(&sidecar.socket, "model-a", &other).refused(&regions_body(4, &["k0"], &[4])),
        Client::hello(&sidecar.socket, "model-a", &other).refused(&regions_body(3, &["k1"], &[u64::MAX / PAGE])),
        Client::connect(&sidecar.socket).refused(&regions_body(3, &["k1"], &[0])),
    ];
    assert!(reasons[0].contains("unknown opcode 42"), "{reasons:?}");
    assert!(reasons[1].contains("key 0 is 0 bytes"), "{reasons:?}");
    assert!(reasons[2].contains("outside the 16384-byte pool mapping"), "{reasons:?}");
    assert!(reasons[3].contains("outside"), "{reasons:?}");
    assert!(reasons[4].contains("first frame must be HELLO"), "{reasons:?}");

    // A wrong fd: a socket instead of a memfd, and a memfd smaller than declared.
    let (not_a_file, _peer) = UnixStream::pair().unwrap();
    let mut wrong = Client::connect(&sidecar.socket);
    wrong.send_with_fd(&hello_body("model-a", PAGE), OwnedFd::from(not_a_file));
    let (status, reason) = wrong.reply().unwrap();
    assert_eq!(status, 1);
    assert!(String::from_utf8_lossy(&reason).contains("not a regular file or memfd"));
    let mut short = Client::connect(&sidecar.socket);
    short.send_with_fd(&hello_body("model-a", 1 << 30), &other.file);
    let (status, reason) = short.reply().unwrap();
    assert_eq!(status, 1);
    assert!(String::from_utf8_lossy(&reason).contains("holds 16384"), "{}", String::from_utf8_lossy(&reason));

    // A client that dies mid-frame: a length prefix promising more than it sends.
    let mut dying = Client::hello(&sidecar.socket, "model-a", &other);
    dying.stream.write_all(&1000u32.to_le_bytes()).unwrap();
    dying.stream.write_all(&[4, 1]).unwrap();
    drop(dying);

    // A frame with a bad region in its last page changes nothing: the good pages are not
    // overwritten with the bad client's bytes either.
    let attacker_pool = Pool::new(2);
    attacker_pool.fill(0, 99);
    let _ =
        Client::hello(&sidecar.socket, "model-a", &attacker_pool).refused(&regions_body(4, &["new", "k0"], &[0, 7]));

    assert_eq!(good.get(&["k0", "k1", "k2", "k3", "new"], &[8, 9, 10, 11, 12]), [1, 1, 1, 1, 0]);
    for page in 0..4 {
        assert_eq!(pool.page(8 + page), pool.page(page), "page {page} changed");
    }
    let mut fresh = Client::hello(&sidecar.socket, "model-a", &pool);
    assert_eq!(fresh.get(&["k3"], &[13]), [1]);
    assert_eq!(pool.page(13), pool.page(3));
    let deadline = Instant::now() + Duration::from_secs(5);
    while sidecar.metric("kvpilot_cache_connections_closed_total") < 9.0 {
        assert!(Instant::now() < deadline, "closed connections are counted");
        std::thread::sleep(Duration::from_millis(20));
    }
    assert_eq!(sidecar.metric("kvpilot_cache_stored_pages"), 4.0);
}

#[test]
fn eviction_drops_whole_pages_least_recently_used_first() {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = Sidecar::start(dir.path(), &format!("{}", 3 * PAGE));
    let pool = Pool::new(8);
    for page in 0..4 {
        pool.fill(page, 10 + page as u8);
    }
    let mut client = Client::hello(&sidecar.socket, "ns", &pool);
    assert_eq!(client.set(&["a", "b", "c"], &[0, 1, 2]), [1, 1, 1]);
    assert_eq!(client.get(&["a"], &[4]), [1]);
    assert_eq!(client.set(&["d"], &[3]), [1]);
    assert_eq!(client.get(&["a", "b", "c", "d"], &[4, 5, 6, 7]), [1, 0, 1, 1]);
    for (stored, original) in [(4, 0), (6, 2), (7, 3)] {
        assert_eq!(pool.page(stored), pool.page(original));
    }
    assert_eq!(sidecar.metric("kvpilot_cache_evictions_total"), 1.0);
    assert_eq!(sidecar.metric("kvpilot_cache_stored_bytes"), (3 * PAGE) as f64);
}

#[test]
fn concurrent_ranks_each_get_their_own_pages() {
    let dir = tempfile::tempdir().unwrap();
    let sidecar = Sidecar::start(dir.path(), "64MiB");
    std::thread::scope(|scope| {
        for rank in 0..4u8 {
            let socket = sidecar.socket.clone();
            scope.spawn(move || {
                let pool = Pool::new(64);
                let keys: Vec<String> = (0..32).map(|i| format!("page-{i}")).collect();
                let keys: Vec<&str> = keys.iter().map(String::as_str).collect();
                for page in 0..32 {
                    pool.fill(page, rank * 50 + page as u8);
                }
                let mut client = Client::hello(&socket, &format!("tp={rank}/4"), &pool);
                for _ in 0..20 {
                    assert_eq!(client.set(&keys, &(0..32).collect::<Vec<_>>()), vec![1; 32]);
                    assert_eq!(client.get(&keys, &(32..64).collect::<Vec<_>>()), vec![1; 32]);
                }
                for page in 0..32 {
                    assert_eq!(pool.page(32 + page), pool.page(page), "rank {rank} page {page}");
                }
            });
        }
    });
}

#[test]
fn a_killed_sidecar_comes_back_on_the_same_socket() {
    let dir = tempfile::tempdir().unwrap();
    let mut sidecar = Sidecar::start(dir.path(), "64MiB");
    let pool = Pool::new(4);
    pool.fill(0, 5);
    let mut client = Client::hello(&sidecar.socket, "ns", &pool);
    assert_eq!(client.set(&["a"], &[0]), [1]);
    sidecar.kill();
    assert!(client.request(&regions_body(3, &["a"], &[1])).is_err(), "a dead sidecar fails the call");

    // The stale socket file is replaced; the store starts empty and fills again.
    let _restarted = Sidecar::start(dir.path(), "64MiB");
    let mut client = Client::hello(&sidecar.socket, "ns", &pool);
    assert_eq!(client.get(&["a"], &[1]), [0]);
    assert_eq!(client.set(&["a"], &[0]), [1]);
    assert_eq!(client.get(&["a"], &[1]), [1]);
    assert_eq!(pool.page(1), pool.page(0));
}

#[test]
fn install_connector_writes_the_package_sglang_imports() {
    let dir = tempfile::tempdir().unwrap();
    let dest = dir.path().join("opt/kvpilot-py");
    let out = Command::new(env!("CARGO_BIN_EXE_kvpilot")).arg("install-connector").arg(&dest).output().unwrap();
    assert!(out.status.success(), "{}", String::from_utf8_lossy(&out.stderr));
    for file in ["__init__.py", "hicache.py", "wire.py"] {
        let written = std::fs::read_to_string(dest.join("kvpilot_sglang").join(file)).unwrap();
        let repo =
            std::fs::read_to_string(Path::new(env!("CARGO_MANIFEST_DIR")).join("python/kvpilot_sglang").join(file))
                .unwrap();
        assert_eq!(written, repo, "{file}");
    }
}

#[test]
fn bad_flags_are_refused_naming_the_flag() {
    let dir = tempfile::tempdir().unwrap();
    let not_a_socket = dir.path().join("file");
    std::fs::write(&not_a_socket, "").unwrap();
    for (args, expected) in [
        (vec!["--capacity", "0"], "invalid value '0' for '--capacity <BYTES>': \"0\" is 0 bytes"),
        (vec!["--capacity", "lots"], "\"lots\" is not a size in bytes: write a Kubernetes quantity such as 64Gi"),
        (vec!["--capacity", "1GiB", "--socket", not_a_socket.to_str().unwrap()], "exists and is not a socket"),
    ] {
        let out = Command::new(env!("CARGO_BIN_EXE_kvpilot"))
            .arg("cache-runtime")
            .args(&args)
            .args(["--metrics-addr", "127.0.0.1:0"])
            .output()
            .unwrap();
        assert!(!out.status.success(), "{args:?}");
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(stderr.contains(expected), "{args:?}: {stderr}");
    }
}

#[test]
fn a_frame_larger_than_the_store_is_refused_before_it_is_read() {
    let dir = tempfile::tempdir().unwrap();
    let capacity: u64 = 8 << 20;
    let sidecar = Sidecar::start(dir.path(), "8Mi");
    let pool = Pool::new(4);
    for page in 0..4 {
        pool.fill(page, page as u8 + 7);
    }
    let mut good = Client::hello(&sidecar.socket, "model-a", &pool);
    assert_eq!(good.set(&["k0", "k1", "k2", "k3"], &[0, 1, 2, 3]), [1, 1, 1, 1]);
    let before = sidecar.rss_bytes();

    // A client that announces a frame of almost 2 GiB (PUT_BYTES) and streams 300 MB of it.
    let mut greedy = Client::hello(&sidecar.socket, "model-a", &Pool::new(1));
    greedy.stream.write_all(&((2u32 << 30) - 1).to_le_bytes()).unwrap();
    let chunk = vec![5u8; 1 << 20];
    let mut peak = sidecar.rss_bytes();
    let mut streamed = 0;
    while streamed < 300 << 20 {
        if greedy.stream.write_all(&chunk).is_err() {
            break;
        }
        streamed += chunk.len();
        peak = peak.max(sidecar.rss_bytes());
    }
    peak = peak.max(sidecar.rss_bytes());
    let limit = kvpilot::runtime::memory_limit(capacity);
    assert!(peak < limit, "RSS {peak} reached the {limit}-byte limit the pod renders (before: {before})");
    assert!(peak < before + (32 << 20), "RSS grew from {before} to {peak} for a frame it refused");

    // The connection is closed with a reason, said to the client and logged.
    let (status, reason) = greedy.reply().expect("a refusal reply");
    assert_eq!(status, 1);
    let reason = String::from_utf8(reason).unwrap();
    assert!(
        reason.contains("exceeds this sidecar's")
            && reason.contains(&(capacity + kvpilot::runtime::protocol::MAX_FRAME_OVERHEAD).to_string()),
        "{reason}"
    );
    let deadline = Instant::now() + Duration::from_secs(5);
    while !sidecar.log().contains("exceeds this sidecar's") {
        assert!(Instant::now() < deadline, "the refusal is logged: {}", sidecar.log());
        std::thread::sleep(Duration::from_millis(20));
    }

    // The other client's pages are intact, and a frame of a full store still goes through.
    assert_eq!(good.get(&["k0", "k1", "k2", "k3"], &[0, 1, 2, 3]), [1, 1, 1, 1]);
    for page in 0..4 {
        pool.fill(page, 0);
    }
    assert_eq!(good.get(&["k0", "k1", "k2", "k3"], &[0, 1, 2, 3]), [1, 1, 1, 1]);
    let expected = Pool::new(4);
    for page in 0..4 {
        expected.fill(page, page as u8 + 7);
        assert_eq!(pool.page(page), expected.page(page), "page {page}");
    }
    let mut body = vec![5u8];
    encode_keys(&[b"whole".as_slice()], &mut body);
    body.extend_from_slice(&(capacity / 2).to_le_bytes());
    body.extend(std::iter::repeat_n(3u8, (capacity / 2) as usize));
    let (status, stored) = good.request(&body).unwrap();
    assert_eq!((status, stored), (0, vec![1]));
}
