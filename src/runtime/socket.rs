//! The Unix-socket server: one thread per rank-process connection, each with its own session
//! (namespace and pool mapping), all sharing one [`PageStore`].
//!
//! Plain threads rather than tokio: every request is a blocking memcpy of up to a GiB between
//! the mapping and the store, which would stall an async executor, and the number of clients is
//! small (a few threads per SGLang rank).

use std::io::{self, IoSliceMut, Read, Write};
use std::mem::MaybeUninit;
use std::os::fd::OwnedFd;
use std::os::unix::net::{UnixListener, UnixStream};
use std::sync::{Arc, Condvar, Mutex};
use std::time::{Duration, Instant};

use rustix::net::{RecvAncillaryBuffer, RecvAncillaryMessage, RecvFlags};
use thiserror::Error;

use super::mapping::{MappingError, PoolMapping};
use super::metrics::Metrics;
use super::protocol::{self, FrameError, Keys, Regions, Request, STATUS_ERROR, STATUS_OK};
use super::store::{Namespace, PageStore};

/// Why a connection was closed by the sidecar.
#[derive(Debug, Error)]
pub enum ConnectionError {
    #[error("socket error: {0}")]
    Io(#[from] io::Error),
    #[error("the client closed the connection mid-frame ({got} of {want} bytes)")]
    ClosedMidFrame { got: usize, want: usize },
    #[error(
        "frame of {len} bytes exceeds this sidecar's {limit}-byte limit (its --capacity and the frame's keys: \
         larger frames could never be stored)"
    )]
    FrameTooLarge { len: u64, limit: u64 },
    #[error("frames of other connections held the sidecar's {limit}-byte frame memory for {waited:?}; retry")]
    FrameMemoryBusy { limit: u64, waited: Duration },
    #[error("malformed frame: {0}")]
    Malformed(#[from] FrameError),
    #[error("the pool mapping refused the frame: {0}")]
    Mapping(#[from] MappingError),
    #[error("{0}")]
    Protocol(&'static str),
}

impl ConnectionError {
    /// Label for `kvpilot_cache_connections_closed`.
    fn reason(&self) -> &'static str {
        match self {
            Self::Io(_) => "io",
            Self::ClosedMidFrame { .. } => "closed_mid_frame",
            Self::FrameTooLarge { .. } | Self::Malformed(_) => "malformed",
            Self::FrameMemoryBusy { .. } => "busy",
            Self::Mapping(MappingError::OutOfBounds { .. }) => "bad_region",
            Self::Mapping(_) => "bad_fd",
            Self::Protocol(_) => "protocol",
        }
    }
}

/// A request body and the fd that came with it (HELLO's memfd), holding its share of the
/// frame memory until it is dropped.
struct Frame<'a> {
    body: Vec<u8>,
    fd: Option<OwnedFd>,
    _reserved: Reservation<'a>,
}

/// The bytes all connections' frames may hold at once: one frame limit, so that however many
/// ranks send at once, the sidecar's memory stays within `runtime::memory_limit`.
pub struct FrameBudget {
    limit: u64,
    in_use: Mutex<u64>,
    released: Condvar,
}

/// How long a frame waits for memory that other connections' frames hold before it is refused:
/// long enough for any honest frame to be read and stored, short enough that a stalled client
/// cannot hang every rank.
const FRAME_MEMORY_WAIT: Duration = Duration::from_secs(30);

impl FrameBudget {
    /// The budget of a sidecar whose store holds `capacity` bytes.
    pub fn for_capacity(capacity: u64) -> Self {
        Self { limit: protocol::frame_limit(capacity), in_use: Mutex::new(0), released: Condvar::new() }
    }

    /// Reserves `len` bytes for a frame, waiting while other frames hold them.
    fn reserve(&self, len: u64) -> Result<Reservation<'_>, ConnectionError> {
        if len > self.limit {
            return Err(ConnectionError::FrameTooLarge { len, limit: self.limit });
        }
        let in_use = self.in_use.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        let (mut in_use, timeout) = self
            .released
            .wait_timeout_while(in_use, FRAME_MEMORY_WAIT, |in_use| *in_use + len > self.limit)
            .unwrap_or_else(|poisoned| poisoned.into_inner());
        if timeout.timed_out() && *in_use + len > self.limit {
            return Err(ConnectionError::FrameMemoryBusy { limit: self.limit, waited: FRAME_MEMORY_WAIT });
        }
        *in_use += len;
        Ok(Reservation { budget: self, len })
    }
}

/// Bytes of a [`FrameBudget`] held by one frame.
struct Reservation<'a> {
    budget: &'a FrameBudget,
    len: u64,
}

impl Drop for Reservation<'_> {
    fn drop(&mut self) {
        let mut in_use = self.budget.in_use.lock().unwrap_or_else(|poisoned| poisoned.into_inner());
        *in_use -= self.len;
        self.budget.released.notify_all();
    }
}

struct Session {
    namespace: Namespace,
    mapping: Option<PoolMapping>,
}

/// Accepts connections until the listener fails, serving each on its own thread.
pub fn serve(listener: UnixListener, store: Arc<PageStore>, metrics: Arc<Metrics>) -> io::Result<()> {
    let budget = Arc::new(FrameBudget::for_capacity(store.capacity()));
    metrics.set_ready();
    for stream in listener.incoming() {
        let stream = match stream {
            Ok(stream) => stream,
            // A client that vanished between connect and accept: nothing to serve.
            Err(e) if e.kind() == io::ErrorKind::ConnectionAborted => continue,
            Err(e) => return Err(e),
        };
        let (store, metrics, budget) = (Arc::clone(&store), Arc::clone(&metrics), Arc::clone(&budget));
        std::thread::Builder::new().name("kvpilot-conn".into()).spawn(move || {
            metrics.connection_opened();
            let connection = Connection { stream, store: &store, metrics: &metrics, budget: &budget, session: None };
            let reason = match connection.run() {
                Ok(()) => "eof",
                Err(e) => {
                    tracing::warn!(error = %e, "closing connection");
                    e.reason()
                }
            };
            metrics.connection_closed(reason);
        })?;
    }
    Ok(())
}

struct Connection<'a> {
    stream: UnixStream,
    store: &'a PageStore,
    metrics: &'a Metrics,
    budget: &'a FrameBudget,
    session: Option<Session>,
}

impl Connection<'_> {
    fn run(mut self) -> Result<(), ConnectionError> {
        let budget = self.budget;
        loop {
            let result = match self.read_frame(budget) {
                Ok(None) => return Ok(()),
                Ok(Some(Frame { body, fd, _reserved })) => {
                    protocol::parse(&body).map_err(ConnectionError::from).and_then(|request| self.handle(request, fd))
                }
                Err(e) => Err(e),
            };
            if let Err(e) = result {
                if !matches!(e, ConnectionError::Io(_) | ConnectionError::ClosedMidFrame { .. }) {
                    // Best effort: the client may be gone already; the close is what matters.
                    let _ = self.stream.write_all(&protocol::reply(STATUS_ERROR, e.to_string().as_bytes()));
                }
                return Err(e);
            }
        }
    }

    /// The next frame's body and the fd that came with it; None at a clean end of stream.
    fn read_frame<'b>(&mut self, budget: &'b FrameBudget) -> Result<Option<Frame<'b>>, ConnectionError> {
        let mut header = [0u8; 4];
        let mut got = 0;
        let mut fd = None;
        while got < header.len() {
            // Room for a few fds: a client sending more than one has its extras closed by the
            // drain below, instead of the kernel truncating silently.
            let mut space = [MaybeUninit::uninit(); rustix::cmsg_space!(ScmRights(4))];
            let mut control = RecvAncillaryBuffer::new(&mut space);
            let received = rustix::net::recvmsg(
                &self.stream,
                &mut [IoSliceMut::new(&mut header[got..])],
                &mut control,
                RecvFlags::CMSG_CLOEXEC,
            )
            .map_err(io::Error::from)?;
            for message in control.drain() {
                if let RecvAncillaryMessage::ScmRights(fds) = message {
                    for received_fd in fds {
                        if fd.replace(received_fd).is_some() {
                            return Err(ConnectionError::Protocol(
                                "more than one fd with a frame; send only the host pool's memfd",
                            ));
                        }
                    }
                }
            }
            if received.bytes == 0 {
                return if got == 0 { Ok(None) } else { Err(ConnectionError::ClosedMidFrame { got, want: 4 }) };
            }
            got += received.bytes;
        }
        let len = u64::from(u32::from_le_bytes(header));
        let reserved = budget.reserve(len)?;
        // Grows as bytes arrive, so a lying length costs nothing until the data comes.
        let mut body = Vec::new();
        (&self.stream).take(len).read_to_end(&mut body)?;
        if body.len() < len as usize {
            return Err(ConnectionError::ClosedMidFrame { got: body.len(), want: len as usize });
        }
        Ok(Some(Frame { body, fd, _reserved: reserved }))
    }

    fn handle(&mut self, request: Request<'_>, fd: Option<OwnedFd>) -> Result<(), ConnectionError> {
        let started = Instant::now();
        if !matches!(request, Request::Hello { .. }) && fd.is_some() {
            return Err(ConnectionError::Protocol("an fd may only come with HELLO"));
        }
        let op = match request {
            Request::Hello { namespace, pool_bytes } => {
                self.hello(namespace, pool_bytes, fd)?;
                "hello"
            }
            Request::Exists { keys } => {
                let session = self.session()?;
                let present: Vec<u8> =
                    self.store.contains(session.namespace, keys.iter()).into_iter().map(u8::from).collect();
                self.reply(&present)?;
                "exists"
            }
            Request::Get { keys, regions } => {
                let copied = self.get(&keys, &regions)?;
                self.reply(&copied)?;
                "get"
            }
            Request::Set { keys, regions } => {
                let stored = self.set(&keys, &regions)?;
                self.reply(&stored)?;
                "set"
            }
            Request::PutBytes { keys, values } => {
                let namespace = self.session()?.namespace;
                let mut stored = Vec::with_capacity(keys.len());
                for (key, value) in keys.iter().zip(values) {
                    stored.push(u8::from(self.insert(namespace, key, value.to_vec())));
                }
                self.reply(&stored)?;
                "put_bytes"
            }
            Request::GetBytes { keys } => {
                self.get_bytes(&keys)?;
                "get_bytes"
            }
            Request::Clear => {
                let namespace = self.session()?.namespace;
                let dropped = self.store.clear(namespace);
                tracing::info!(dropped, "cleared a namespace");
                self.reply(&[])?;
                "clear"
            }
        };
        self.metrics.served(op, started.elapsed());
        Ok(())
    }

    fn session(&self) -> Result<&Session, ConnectionError> {
        self.session.as_ref().ok_or(ConnectionError::Protocol("the first frame must be HELLO"))
    }

    fn mapped(&self) -> Result<(&Session, &PoolMapping), ConnectionError> {
        let session = self.session()?;
        let mapping = session.mapping.as_ref().ok_or(ConnectionError::Protocol(
            "GET and SET need a host pool; this session's HELLO sent none (use the copy-mode operations)",
        ))?;
        Ok((session, mapping))
    }

    fn hello(&mut self, namespace: &[u8], pool_bytes: u64, fd: Option<OwnedFd>) -> Result<(), ConnectionError> {
        if self.session.is_some() {
            return Err(ConnectionError::Protocol("HELLO may come only once per connection"));
        }
        let mapping = match (pool_bytes, fd) {
            (0, None) => None,
            (0, Some(_)) => return Err(ConnectionError::Protocol("an fd came with a pool size of 0")),
            (_, None) => return Err(ConnectionError::Protocol("HELLO declares a pool but carries no fd")),
            (len, Some(fd)) => Some(PoolMapping::new(&fd, len)?),
        };
        tracing::info!(
            namespace = %String::from_utf8_lossy(namespace),
            pool_bytes,
            "session started"
        );
        self.session = Some(Session { namespace: self.store.namespace(namespace), mapping });
        self.reply(&[])
    }

    /// Every region of every page must lie in the mapping before any byte moves, so a bad frame
    /// changes nothing.
    fn check_regions(mapping: &PoolMapping, keys: &Keys<'_>, regions: &Regions<'_>) -> Result<(), ConnectionError> {
        for page in 0..keys.len() {
            for (offset, len) in regions.page(page) {
                mapping.check(offset, len)?;
            }
        }
        Ok(())
    }

    fn get(&self, keys: &Keys<'_>, regions: &Regions<'_>) -> Result<Vec<u8>, ConnectionError> {
        let (session, mapping) = self.mapped()?;
        Self::check_regions(mapping, keys, regions)?;
        let pages = self.store.get(session.namespace, keys.iter());
        let mut copied = vec![0u8; keys.len()];
        let mut bytes = 0;
        for (index, page) in pages.iter().enumerate() {
            // A stored page of another size belongs to another geometry: a miss, not a copy.
            let Some(page) = page.as_ref().filter(|page| page.len() as u64 == regions.page_len(index)) else {
                continue;
            };
            let mut from = 0usize;
            for (offset, len) in regions.page(index) {
                mapping.write(offset, &page[from..from + len as usize])?;
                from += len as usize;
            }
            copied[index] = 1;
            bytes += page.len() as u64;
        }
        let hits = copied.iter().filter(|&&c| c == 1).count() as u64;
        self.metrics.lookups(hits, keys.len() as u64 - hits);
        self.metrics.read(bytes);
        Ok(copied)
    }

    fn set(&self, keys: &Keys<'_>, regions: &Regions<'_>) -> Result<Vec<u8>, ConnectionError> {
        let (session, mapping) = self.mapped()?;
        Self::check_regions(mapping, keys, regions)?;
        let namespace = session.namespace;
        // Keys are content hashes: a stored key already holds these bytes.
        let present = self.store.contains(namespace, keys.iter());
        let mut stored = Vec::with_capacity(keys.len());
        for (index, key) in keys.iter().enumerate() {
            if present[index] {
                stored.push(1);
                continue;
            }
            let mut page = self.store.buffer(regions.page_len(index) as usize);
            for (offset, len) in regions.page(index) {
                mapping.read_into(offset, len, &mut page)?;
            }
            stored.push(u8::from(self.insert(namespace, key, page)));
        }
        Ok(stored)
    }

    fn insert(&self, namespace: Namespace, key: &[u8], page: Vec<u8>) -> bool {
        let size = page.len() as u64;
        let inserted = self.store.insert(namespace, key, Arc::new(page));
        if inserted.stored {
            self.metrics.stored(size, inserted.evicted);
        }
        inserted.stored
    }

    fn get_bytes(&mut self, keys: &Keys<'_>) -> Result<(), ConnectionError> {
        let namespace = self.session()?.namespace;
        let pages = self.store.get(namespace, keys.iter());
        let mut head = Vec::with_capacity(keys.len() * 9);
        head.extend(pages.iter().map(|page| u8::from(page.is_some())));
        let mut total = 0u64;
        for page in &pages {
            let len = page.as_ref().map_or(0, |page| page.len() as u64);
            total += len;
            head.extend_from_slice(&len.to_le_bytes());
        }
        let hits = pages.iter().filter(|page| page.is_some()).count() as u64;
        self.metrics.lookups(hits, keys.len() as u64 - hits);
        self.metrics.read(total);
        let frame_len = u32::try_from(1 + head.len() as u64 + total)
            .map_err(|_| ConnectionError::Protocol("the requested pages exceed one reply frame; ask for fewer keys"))?;
        self.stream.write_all(&frame_len.to_le_bytes())?;
        self.stream.write_all(&[STATUS_OK])?;
        self.stream.write_all(&head)?;
        for page in pages.iter().flatten() {
            self.stream.write_all(page)?;
        }
        Ok(())
    }

    fn reply(&mut self, payload: &[u8]) -> Result<(), ConnectionError> {
        self.stream.write_all(&protocol::reply(STATUS_OK, payload))?;
        Ok(())
    }
}
