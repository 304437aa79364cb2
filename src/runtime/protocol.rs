//! The wire format between the SGLang connector (`python/kvpilot_sglang/wire.py`) and the
//! sidecar. Every frame is `u32 body length (LE) ‖ body`; all integers are little-endian.
//!
//! Request bodies start with an opcode byte:
//!
//! | op | body after the opcode |
//! |---|---|
//! | 1 HELLO | `u16 version ‖ u16 ns_len ‖ namespace ‖ u64 pool_bytes`; the host pool's memfd rides along (SCM_RIGHTS) when `pool_bytes > 0` |
//! | 2 EXISTS | keys |
//! | 3 GET, 4 SET | keys ‖ `u8 regions per page` ‖ `u64 offset[n·r]` ‖ `u64 len[n·r]` (offsets into the pool mapping) |
//! | 5 PUT_BYTES | keys ‖ `u64 len[n]` ‖ the values, concatenated |
//! | 6 GET_BYTES | keys |
//! | 7 CLEAR | nothing: drops every page of the connection's namespace |
//!
//! where keys = `u16 n ‖ u16 key_len[n] ‖ key bytes, concatenated`.
//!
//! Replies are `u32 length ‖ u8 status ‖ payload`. Status 0 (ok) carries one byte per key (1 =
//! stored / present / copied) for EXISTS, GET, SET and PUT_BYTES, and for GET_BYTES that byte map
//! followed by `u64 len[n]` and the values of the hits. Status 1 carries a UTF-8 reason, after
//! which the sidecar closes the connection.

use thiserror::Error;

/// The protocol version HELLO must carry.
pub const VERSION: u16 = 1;
/// Most keys one frame may carry; SGLang never passes more than 128 pages per call.
pub const MAX_KEYS: usize = 1024;
/// Longest key in bytes (SGLang's page hashes are 64 hex characters plus suffixes).
pub const MAX_KEY_LEN: usize = 1024;
/// Most memory regions one page may span (MHA page-first: K and V; MLA: one).
pub const MAX_REGIONS_PER_PAGE: usize = 16;
/// Longest namespace in bytes.
pub const MAX_NAMESPACE_LEN: usize = 4096;
/// Largest request body any sidecar accepts: 128 copy-mode pages of 8 MiB fit with room.
pub const MAX_FRAME: u64 = 2 << 30;
/// What a frame carries beside page bytes, at most: the opcode, the keys with their lengths,
/// a length per key and the regions of every page.
pub const MAX_FRAME_OVERHEAD: u64 =
    (1 + 2 + MAX_KEYS * (2 + MAX_KEY_LEN) + MAX_KEYS * 8 + 1 + MAX_KEYS * MAX_REGIONS_PER_PAGE * 16) as u64;

/// Largest request body a sidecar of `capacity` bytes accepts: the smaller of [`MAX_FRAME`]
/// and the capacity plus [`MAX_FRAME_OVERHEAD`], since a frame carrying more page bytes than
/// the store holds could never be stored, and reading it would only grow the sidecar's memory.
pub fn frame_limit(capacity: u64) -> u64 {
    MAX_FRAME.min(capacity.saturating_add(MAX_FRAME_OVERHEAD))
}

/// Reply status: success.
pub const STATUS_OK: u8 = 0;
/// Reply status: protocol error; the connection closes after it.
pub const STATUS_ERROR: u8 = 1;

/// Why a frame was refused.
#[derive(Debug, Error, PartialEq, Eq)]
pub enum FrameError {
    #[error("frame is empty (no opcode)")]
    Empty,
    #[error("unknown opcode {0}")]
    UnknownOpcode(u8),
    #[error("frame ends inside {0}")]
    Truncated(&'static str),
    #[error("{0} trailing bytes after the frame's last field")]
    Trailing(usize),
    #[error("protocol version {got}, this sidecar speaks {VERSION}; upgrade the connector and sidecar together")]
    Version { got: u16 },
    #[error("{count} keys in one frame, at most {MAX_KEYS}")]
    TooManyKeys { count: usize },
    #[error("key {index} is {len} bytes; keys are 1..={MAX_KEY_LEN} bytes")]
    KeyLength { index: usize, len: usize },
    #[error("namespace is {len} bytes; it must be 1..={MAX_NAMESPACE_LEN}")]
    NamespaceLength { len: usize },
    #[error("{0} regions per page; it must be 1..={MAX_REGIONS_PER_PAGE}")]
    RegionsPerPage(usize),
    #[error("region {index} has length 0")]
    EmptyRegion { index: usize },
    #[error("value lengths add up past the frame")]
    ValueOverflow,
}

/// A parsed request. Keys and values borrow the frame body.
#[derive(Debug, PartialEq, Eq)]
pub enum Request<'a> {
    /// Starts a session: the namespace every key is folded into, and the host pool size when a
    /// memfd comes with it (0: copy mode only).
    Hello { namespace: &'a [u8], pool_bytes: u64 },
    /// Which keys are stored.
    Exists { keys: Keys<'a> },
    /// Copy stored pages into the pool mapping.
    Get { keys: Keys<'a>, regions: Regions<'a> },
    /// Copy pages from the pool mapping into the store.
    Set { keys: Keys<'a>, regions: Regions<'a> },
    /// Store the values carried in the frame.
    PutBytes { keys: Keys<'a>, values: Vec<&'a [u8]> },
    /// Return the stored values in the reply.
    GetBytes { keys: Keys<'a> },
    /// Drop the namespace's pages.
    Clear,
}

/// The keys of a request, in order.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Keys<'a>(Vec<&'a [u8]>);

impl<'a> Keys<'a> {
    /// The keys.
    pub fn iter(&self) -> impl ExactSizeIterator<Item = &'a [u8]> + '_ {
        self.0.iter().copied()
    }

    /// How many keys.
    pub fn len(&self) -> usize {
        self.0.len()
    }

    /// Whether there are none.
    pub fn is_empty(&self) -> bool {
        self.0.is_empty()
    }
}

/// Where each page lives in the pool mapping: `per_page` (offset, length) pairs per key.
#[derive(Debug, PartialEq, Eq, Clone)]
pub struct Regions<'a> {
    per_page: usize,
    offsets: &'a [u8],
    lengths: &'a [u8],
}

impl Regions<'_> {
    /// The (offset, length) regions of page `page`, in order.
    pub fn page(&self, page: usize) -> impl Iterator<Item = (u64, u64)> + '_ {
        (page * self.per_page..(page + 1) * self.per_page)
            .map(|i| (read_u64_at(self.offsets, i), read_u64_at(self.lengths, i)))
    }

    /// Total bytes of page `page`.
    pub fn page_len(&self, page: usize) -> u64 {
        self.page(page).fold(0u64, |sum, (_, len)| sum.saturating_add(len))
    }
}

fn read_u64_at(bytes: &[u8], index: usize) -> u64 {
    let mut word = [0u8; 8];
    word.copy_from_slice(&bytes[index * 8..index * 8 + 8]);
    u64::from_le_bytes(word)
}

struct Reader<'a> {
    bytes: &'a [u8],
}

impl<'a> Reader<'a> {
    fn take(&mut self, n: usize, what: &'static str) -> Result<&'a [u8], FrameError> {
        if self.bytes.len() < n {
            return Err(FrameError::Truncated(what));
        }
        let (head, rest) = self.bytes.split_at(n);
        self.bytes = rest;
        Ok(head)
    }

    fn u8(&mut self, what: &'static str) -> Result<u8, FrameError> {
        Ok(self.take(1, what)?[0])
    }

    fn u16(&mut self, what: &'static str) -> Result<u16, FrameError> {
        let b = self.take(2, what)?;
        Ok(u16::from_le_bytes([b[0], b[1]]))
    }

    fn u64(&mut self, what: &'static str) -> Result<u64, FrameError> {
        Ok(read_u64_at(self.take(8, what)?, 0))
    }

    fn keys(&mut self) -> Result<Keys<'a>, FrameError> {
        let count = usize::from(self.u16("the key count")?);
        if count > MAX_KEYS {
            return Err(FrameError::TooManyKeys { count });
        }
        let lengths = self.take(count * 2, "the key lengths")?;
        let mut keys = Vec::with_capacity(count);
        for index in 0..count {
            let len = usize::from(u16::from_le_bytes([lengths[index * 2], lengths[index * 2 + 1]]));
            if len == 0 || len > MAX_KEY_LEN {
                return Err(FrameError::KeyLength { index, len });
            }
            keys.push(self.take(len, "the keys")?);
        }
        Ok(Keys(keys))
    }

    fn regions(&mut self, pages: usize) -> Result<Regions<'a>, FrameError> {
        let per_page = usize::from(self.u8("the regions per page")?);
        if per_page == 0 || per_page > MAX_REGIONS_PER_PAGE {
            return Err(FrameError::RegionsPerPage(per_page));
        }
        let count = pages * per_page;
        let offsets = self.take(count * 8, "the region offsets")?;
        let lengths = self.take(count * 8, "the region lengths")?;
        if let Some(index) = (0..count).find(|&i| read_u64_at(lengths, i) == 0) {
            return Err(FrameError::EmptyRegion { index });
        }
        Ok(Regions { per_page, offsets, lengths })
    }

    fn finish(self) -> Result<(), FrameError> {
        if self.bytes.is_empty() { Ok(()) } else { Err(FrameError::Trailing(self.bytes.len())) }
    }
}

/// Parses one request body (the bytes after the length prefix).
pub fn parse(body: &[u8]) -> Result<Request<'_>, FrameError> {
    let mut r = Reader { bytes: body };
    let op = r.u8("the opcode").map_err(|_| FrameError::Empty)?;
    let request = match op {
        1 => {
            let got = r.u16("the version")?;
            if got != VERSION {
                return Err(FrameError::Version { got });
            }
            let len = usize::from(r.u16("the namespace length")?);
            if len == 0 || len > MAX_NAMESPACE_LEN {
                return Err(FrameError::NamespaceLength { len });
            }
            let namespace = r.take(len, "the namespace")?;
            let pool_bytes = r.u64("the pool size")?;
            Request::Hello { namespace, pool_bytes }
        }
        2 => Request::Exists { keys: r.keys()? },
        3 | 4 => {
            let keys = r.keys()?;
            let regions = r.regions(keys.len())?;
            if op == 3 { Request::Get { keys, regions } } else { Request::Set { keys, regions } }
        }
        5 => {
            let keys = r.keys()?;
            let lengths: Vec<u64> = (0..keys.len()).map(|_| r.u64("the value lengths")).collect::<Result<_, _>>()?;
            let total =
                lengths.iter().try_fold(0u64, |sum, &len| sum.checked_add(len)).ok_or(FrameError::ValueOverflow)?;
            if total > r.bytes.len() as u64 {
                return Err(FrameError::Truncated("the values"));
            }
            let values = lengths.iter().map(|&len| r.take(len as usize, "the values")).collect::<Result<_, _>>()?;
            Request::PutBytes { keys, values }
        }
        6 => Request::GetBytes { keys: r.keys()? },
        7 => Request::Clear,
        other => return Err(FrameError::UnknownOpcode(other)),
    };
    r.finish()?;
    Ok(request)
}

/// Encodes `keys` as the frame's keys section (what the connector sends).
pub fn encode_keys(keys: &[&[u8]], out: &mut Vec<u8>) {
    out.extend_from_slice(&(keys.len() as u16).to_le_bytes());
    for key in keys {
        out.extend_from_slice(&(key.len() as u16).to_le_bytes());
    }
    for key in keys {
        out.extend_from_slice(key);
    }
}

/// A reply frame: length prefix, status, payload.
pub fn reply(status: u8, payload: &[u8]) -> Vec<u8> {
    let mut out = Vec::with_capacity(5 + payload.len());
    out.extend_from_slice(&(payload.len() as u32 + 1).to_le_bytes());
    out.push(status);
    out.extend_from_slice(payload);
    out
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn frame(op: u8, keys: &[&[u8]], tail: &[u8]) -> Vec<u8> {
        let mut body = vec![op];
        encode_keys(keys, &mut body);
        body.extend_from_slice(tail);
        body
    }

    fn regions(per_page: u8, pairs: &[(u64, u64)]) -> Vec<u8> {
        let mut tail = vec![per_page];
        pairs.iter().for_each(|(offset, _)| tail.extend_from_slice(&offset.to_le_bytes()));
        pairs.iter().for_each(|(_, len)| tail.extend_from_slice(&len.to_le_bytes()));
        tail
    }

    #[test]
    fn hello_carries_namespace_and_pool_size() {
        let mut body = vec![1];
        body.extend_from_slice(&VERSION.to_le_bytes());
        body.extend_from_slice(&2u16.to_le_bytes());
        body.extend_from_slice(b"ns");
        body.extend_from_slice(&4096u64.to_le_bytes());
        assert_eq!(parse(&body), Ok(Request::Hello { namespace: b"ns", pool_bytes: 4096 }));
        body[1] = 9;
        assert_eq!(parse(&body), Err(FrameError::Version { got: 9 }));
    }

    #[test]
    fn get_lists_each_pages_regions() {
        let body = frame(3, &[b"a", b"bb"], &regions(2, &[(0, 8), (64, 8), (16, 8), (80, 8)]));
        let Ok(Request::Get { keys, regions }) = parse(&body) else { panic!("{:?}", parse(&body)) };
        assert_eq!(keys.iter().collect::<Vec<_>>(), [b"a".as_slice(), b"bb"]);
        assert_eq!(regions.page(1).collect::<Vec<_>>(), [(16, 8), (80, 8)]);
        assert_eq!(regions.page_len(0), 16);
    }

    #[test]
    fn put_bytes_splits_values() {
        let mut tail = Vec::new();
        tail.extend_from_slice(&3u64.to_le_bytes());
        tail.extend_from_slice(&1u64.to_le_bytes());
        tail.extend_from_slice(b"xyzw");
        let body = frame(5, &[b"k1", b"k2"], &tail);
        let Ok(Request::PutBytes { values, .. }) = parse(&body) else { panic!() };
        assert_eq!(values, [b"xyz".as_slice(), b"w"]);
    }

    #[test]
    fn malformed_frames_name_the_field() {
        assert_eq!(parse(&[]), Err(FrameError::Empty));
        assert_eq!(parse(&[42]), Err(FrameError::UnknownOpcode(42)));
        assert_eq!(parse(&[2, 1, 0, 0, 0]), Err(FrameError::KeyLength { index: 0, len: 0 }));
        assert_eq!(parse(&[2, 1, 0, 5, 0, b'a']), Err(FrameError::Truncated("the keys")));
        assert_eq!(parse(&frame(3, &[b"a"], &regions(1, &[(0, 0)]))), Err(FrameError::EmptyRegion { index: 0 }));
        assert_eq!(parse(&frame(4, &[b"a"], &[0])), Err(FrameError::RegionsPerPage(0)));
        assert_eq!(parse(&[7, 0]), Err(FrameError::Trailing(1)));
        let too_many = (MAX_KEYS as u16 + 1).to_le_bytes();
        assert_eq!(parse(&[2, too_many[0], too_many[1]]), Err(FrameError::TooManyKeys { count: MAX_KEYS + 1 }));
        let mut huge = Vec::new();
        huge.extend_from_slice(&u64::MAX.to_le_bytes());
        huge.extend_from_slice(&2u64.to_le_bytes());
        assert_eq!(parse(&frame(5, &[b"a", b"b"], &huge)), Err(FrameError::ValueOverflow));
    }

    proptest! {
        // Any bytes at all: the parser answers, never panics, and never reads past the body.
        #[test]
        fn arbitrary_bytes_never_panic(body in proptest::collection::vec(any::<u8>(), 0..512)) {
            let _ = parse(&body);
        }

        // Any frame cut short is refused, never half-accepted.
        #[test]
        fn truncated_frames_are_refused(
            keys in proptest::collection::vec(proptest::collection::vec(any::<u8>(), 1..40), 1..20),
            per_page in 1u8..4,
            cut in 1usize..64,
        ) {
            let key_refs: Vec<&[u8]> = keys.iter().map(Vec::as_slice).collect();
            let pairs: Vec<(u64, u64)> = (0..keys.len() * usize::from(per_page)).map(|i| (i as u64 * 64, 64)).collect();
            let body = frame(4, &key_refs, &regions(per_page, &pairs));
            let Ok(Request::Set { keys: parsed, regions: parsed_regions }) = parse(&body) else { panic!() };
            prop_assert_eq!(parsed.iter().collect::<Vec<_>>(), key_refs.clone());
            prop_assert_eq!(parsed_regions.page_len(keys.len() - 1), 64 * u64::from(per_page));
            let cut = cut.min(body.len());
            prop_assert!(parse(&body[..body.len() - cut]).is_err());
        }
    }
}
