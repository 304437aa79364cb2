//! The radix prefix tree over token ids: logical only, like SGLang's unified tree core. It
//! decides what to keep and returns what to free; the cache executes that against the
//! allocators (`cache-runtime.md` §1.3).
//!
//! Each node holds per-component data: `full` pages (every node has them when the layout has a
//! full-attention pool), `swa` pages (`None` is a tombstone) and an `ssm` state slot (the state
//! after the node's last token). Locks are receipts: `full` locks the path to the root, `swa`
//! a segment covering the sliding window, `ssm` the end node only.
//!
//! Eviction is O(1) per node: each component has an intrusive LRU list of the nodes whose data
//! it may evict (live and unlocked). Paths are touched leaf-first, so a parent always sits ahead
//! of its children in the full list and that list's tail is always a leaf.

use std::collections::HashMap;

use rustc_hash::FxHashMap;

use super::Component;

pub(crate) type NodeId = u32;
/// No node (list ends, the root's parent).
pub(crate) const NIL: NodeId = u32::MAX;

/// Which components the layout has, and their parameters.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct TreeShape {
    pub page_size: usize,
    pub full: bool,
    pub swa: bool,
    pub ssm: bool,
    /// Sliding window in tokens (SWA only).
    pub window: usize,
}

/// A node's children, keyed by the first token of their first page. With pages longer than one
/// token two children can share a first token; the later ones wait in `extra`.
#[derive(Debug, Default)]
struct Children {
    by_first_token: FxHashMap<u32, NodeId>,
    extra: Vec<(u32, NodeId)>,
}

impl Children {
    fn is_empty(&self) -> bool {
        self.by_first_token.is_empty() && self.extra.is_empty()
    }

    fn find(&self, page: &[u32], nodes: &[Node]) -> Option<NodeId> {
        let first = *page.first()?;
        let candidate = *self.by_first_token.get(&first)?;
        if nodes[candidate as usize].key.starts_with(page) {
            return Some(candidate);
        }
        self.extra.iter().map(|(_, c)| *c).find(|c| nodes[*c as usize].key.starts_with(page))
    }

    fn add(&mut self, first: u32, child: NodeId) {
        if let std::collections::hash_map::Entry::Vacant(slot) = self.by_first_token.entry(first) {
            slot.insert(child);
        } else {
            self.extra.push((first, child));
        }
    }

    fn remove(&mut self, first: u32, child: NodeId) {
        if self.by_first_token.get(&first) == Some(&child) {
            self.by_first_token.remove(&first);
            if let Some(i) = self.extra.iter().position(|(f, _)| *f == first) {
                let (_, promoted) = self.extra.swap_remove(i);
                self.by_first_token.insert(first, promoted);
            }
        } else if let Some(i) = self.extra.iter().position(|(_, c)| *c == child) {
            self.extra.swap_remove(i);
        }
    }

    /// Puts `new` where `old` was (a split keeps the first page).
    fn replace(&mut self, first: u32, old: NodeId, new: NodeId) {
        match self.by_first_token.get_mut(&first) {
            Some(slot) if *slot == old => *slot = new,
            _ => {
                if let Some(slot) = self.extra.iter_mut().find(|(_, c)| *c == old) {
                    slot.1 = new;
                }
            }
        }
    }

    fn ids(&self) -> impl Iterator<Item = NodeId> + '_ {
        self.by_first_token.values().copied().chain(self.extra.iter().map(|(_, c)| *c))
    }
}

#[derive(Debug)]
struct Node {
    parent: NodeId,
    key: Vec<u32>,
    children: Children,
    /// Full-attention pages, one per page of `key` (empty without a full pool).
    full: Vec<u32>,
    /// Sliding-window pages; `None` is a tombstone.
    swa: Option<Vec<u32>>,
    /// SSM state slot after the last token; `None` is a tombstone.
    ssm: Option<u32>,
    /// Lock counts per component.
    lock: [u32; 3],
    /// Receipts whose SWA segment starts at this node.
    swa_tops: u32,
    prev: [NodeId; 3],
    next: [NodeId; 3],
    linked: [bool; 3],
    live: bool,
}

impl Node {
    fn new(parent: NodeId, key: Vec<u32>) -> Self {
        Self {
            parent,
            key,
            children: Children::default(),
            full: Vec::new(),
            swa: None,
            ssm: None,
            lock: [0; 3],
            swa_tops: 0,
            prev: [NIL; 3],
            next: [NIL; 3],
            linked: [false; 3],
            live: true,
        }
    }
}

/// What a lock holds, to be handed back to [`Tree::unlock`].
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Receipt {
    /// The deepest node of the locked path (a root locks nothing).
    pub last: NodeId,
    /// Top of the locked SWA segment, or NIL.
    pub swa_top: NodeId,
    /// Whether `last`'s SSM state is locked.
    pub ssm: bool,
    /// Token position where the SWA segment starts.
    pub swa_start: usize,
}

/// Result of a prefix match: the accepted length and the node it ends at.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) struct Matched {
    pub len: usize,
    pub last: NodeId,
}

/// Data the tree gives back when it evicts or when an insert finds it already holds a span.
#[derive(Debug, Default, Clone, PartialEq, Eq)]
pub(crate) struct Freed {
    pub full: Vec<u32>,
    pub swa: Vec<u32>,
    pub ssm: Vec<u32>,
}

/// The request's data for an insert: pages for every inserted page position, SWA pages from
/// `swa_from` on (earlier ones already freed), and an SSM state slot for the end, if any.
#[derive(Debug, Clone, Copy)]
pub(crate) struct InsertData<'a> {
    pub full: &'a [u32],
    pub swa_from: usize,
    pub swa: &'a [u32],
    pub ssm: Option<u32>,
}

/// What an insert did with the request's data.
#[derive(Debug, Clone, PartialEq, Eq)]
pub(crate) struct Inserted {
    pub last: NodeId,
    /// Tokens that were already in the tree before the insert.
    pub reused: usize,
    /// Whether the tree took the SSM slot (otherwise the caller still owns it).
    pub took_ssm: bool,
}

/// Sizes the tree holds, per component: all of it (`held`) and the unlocked part (`evictable`).
/// Tokens for full and swa, slots for ssm.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub(crate) struct TreeSizes {
    pub held: [usize; 3],
    pub evictable: [usize; 3],
}

pub(crate) struct Tree {
    shape: TreeShape,
    nodes: Vec<Node>,
    free_nodes: Vec<NodeId>,
    roots: HashMap<String, NodeId>,
    head: [NodeId; 3],
    tail: [NodeId; 3],
    sizes: TreeSizes,
    /// Receipts whose SWA segment starts at a node, so a split can move them to the new top.
    swa_receipt_tops: FxHashMap<u64, NodeId>,
    live_nodes: usize,
}

const FULL: usize = 0;
const SWA: usize = 1;
const SSM: usize = 2;

impl Tree {
    pub(crate) fn new(shape: TreeShape) -> Self {
        let mut tree = Self {
            shape,
            nodes: Vec::new(),
            free_nodes: Vec::new(),
            roots: HashMap::new(),
            head: [NIL; 3],
            tail: [NIL; 3],
            sizes: TreeSizes::default(),
            swa_receipt_tops: FxHashMap::default(),
            live_nodes: 0,
        };
        tree.root("");
        tree
    }

    pub(crate) fn sizes(&self) -> TreeSizes {
        self.sizes
    }

    /// Nodes in the tree, roots excluded.
    pub(crate) fn node_count(&self) -> usize {
        self.live_nodes - self.roots.len()
    }

    /// The root of a namespace (LoRA adapter or cache salt), created on first use.
    pub(crate) fn root(&mut self, namespace: &str) -> NodeId {
        if let Some(root) = self.roots.get(namespace) {
            return *root;
        }
        let id = self.alloc_node(Node::new(NIL, Vec::new()));
        self.roots.insert(namespace.to_string(), id);
        id
    }

    /// Drops the root of an empty, non-default namespace.
    pub(crate) fn forget_namespace_if_empty(&mut self, namespace: &str) {
        if namespace.is_empty() {
            return;
        }
        if let Some(&root) = self.roots.get(namespace)
            && self.nodes[root as usize].children.is_empty()
            && self.nodes[root as usize].lock[FULL] == 0
        {
            self.roots.remove(namespace);
            self.release_node(root);
        }
    }

    fn alloc_node(&mut self, node: Node) -> NodeId {
        self.live_nodes += 1;
        match self.free_nodes.pop() {
            Some(id) => {
                self.nodes[id as usize] = node;
                id
            }
            None => {
                self.nodes.push(node);
                (self.nodes.len() - 1) as NodeId
            }
        }
    }

    fn release_node(&mut self, id: NodeId) {
        let node = &mut self.nodes[id as usize];
        node.live = false;
        node.key = Vec::new();
        node.full = Vec::new();
        node.children = Children::default();
        self.live_nodes -= 1;
        self.free_nodes.push(id);
    }

    fn is_root(&self, id: NodeId) -> bool {
        self.nodes[id as usize].parent == NIL
    }

    /// Size of a node's live data for a component (tokens, or 1 slot for ssm).
    fn data_size(&self, id: NodeId, c: usize) -> usize {
        let node = &self.nodes[id as usize];
        if node.parent == NIL {
            return 0;
        }
        match c {
            FULL if self.shape.full => node.key.len(),
            SWA if node.swa.is_some() => node.key.len(),
            SSM if node.ssm.is_some() => 1,
            _ => 0,
        }
    }

    fn has_data(&self, id: NodeId, c: usize) -> bool {
        self.data_size(id, c) > 0
    }

    // ----- LRU lists -------------------------------------------------------------------------

    fn should_link(&self, id: NodeId, c: usize) -> bool {
        self.has_data(id, c) && self.nodes[id as usize].lock[c] == 0
    }

    fn unlink(&mut self, id: NodeId, c: usize) {
        if !self.nodes[id as usize].linked[c] {
            return;
        }
        let (prev, next) = (self.nodes[id as usize].prev[c], self.nodes[id as usize].next[c]);
        match prev {
            NIL => self.head[c] = next,
            p => self.nodes[p as usize].next[c] = next,
        }
        match next {
            NIL => self.tail[c] = prev,
            n => self.nodes[n as usize].prev[c] = prev,
        }
        let node = &mut self.nodes[id as usize];
        node.prev[c] = NIL;
        node.next[c] = NIL;
        node.linked[c] = false;
        self.sizes.evictable[c] -= self.data_size(id, c);
    }

    fn link_front(&mut self, id: NodeId, c: usize) {
        debug_assert!(!self.nodes[id as usize].linked[c]);
        let old_head = self.head[c];
        {
            let node = &mut self.nodes[id as usize];
            node.prev[c] = NIL;
            node.next[c] = old_head;
            node.linked[c] = true;
        }
        match old_head {
            NIL => self.tail[c] = id,
            h => self.nodes[h as usize].prev[c] = id,
        }
        self.head[c] = id;
        self.sizes.evictable[c] += self.data_size(id, c);
    }

    /// Links `id` just ahead of (more recent than) `anchor`.
    fn link_before(&mut self, id: NodeId, anchor: NodeId, c: usize) {
        let prev = self.nodes[anchor as usize].prev[c];
        {
            let node = &mut self.nodes[id as usize];
            node.prev[c] = prev;
            node.next[c] = anchor;
            node.linked[c] = true;
        }
        self.nodes[anchor as usize].prev[c] = id;
        match prev {
            NIL => self.head[c] = id,
            p => self.nodes[p as usize].next[c] = id,
        }
        self.sizes.evictable[c] += self.data_size(id, c);
    }

    /// Brings a node's list membership in line with its data and locks; `front` moves a linked
    /// node to the most-recent end.
    fn relink(&mut self, id: NodeId, c: usize, front: bool) {
        let should = self.should_link(id, c);
        let linked = self.nodes[id as usize].linked[c];
        if linked && (!should || front) {
            self.unlink(id, c);
        }
        if should && (!linked || front) {
            self.link_front(id, c);
        }
    }

    /// Marks a path as just used: leaf first, so parents end up ahead of their children.
    fn touch_path(&mut self, last: NodeId) {
        let mut id = last;
        while id != NIL && !self.is_root(id) {
            for c in [FULL, SWA, SSM] {
                if self.nodes[id as usize].linked[c] {
                    self.relink(id, c, true);
                }
            }
            id = self.nodes[id as usize].parent;
        }
    }

    // ----- data changes, with their accounting ----------------------------------------------

    fn add_held(&mut self, id: NodeId, c: usize) {
        self.sizes.held[c] += self.data_size(id, c);
    }

    fn sub_held(&mut self, id: NodeId, c: usize) {
        self.sizes.held[c] -= self.data_size(id, c);
    }

    fn set_swa(&mut self, id: NodeId, pages: Option<Vec<u32>>) -> Option<Vec<u32>> {
        self.unlink(id, SWA);
        self.sub_held(id, SWA);
        let old = std::mem::replace(&mut self.nodes[id as usize].swa, pages);
        self.add_held(id, SWA);
        self.relink(id, SWA, true);
        old
    }

    fn set_ssm(&mut self, id: NodeId, slot: Option<u32>) -> Option<u32> {
        self.unlink(id, SSM);
        self.sub_held(id, SSM);
        let old = std::mem::replace(&mut self.nodes[id as usize].ssm, slot);
        self.add_held(id, SSM);
        self.relink(id, SSM, true);
        old
    }

    // ----- walking ---------------------------------------------------------------------------

    fn common_len(&self, key: &[u32], query: &[u32]) -> usize {
        let n = key.len().min(query.len());
        if key[..n] == query[..n] {
            return n - n % self.shape.page_size;
        }
        const CHUNK: usize = 64;
        let mut i = 0;
        while i + CHUNK <= n && key[i..i + CHUNK] == query[i..i + CHUNK] {
            i += CHUNK;
        }
        while i < n && key[i] == query[i] {
            i += 1;
        }
        i - i % self.shape.page_size
    }

    fn child(&self, parent: NodeId, page: &[u32]) -> Option<NodeId> {
        self.nodes[parent as usize].children.find(page, &self.nodes)
    }

    /// How many tokens of `tokens` the tree holds along one path, without changing anything.
    pub(crate) fn overlap(&self, root: NodeId, tokens: &[u32]) -> usize {
        let p = self.shape.page_size;
        let (mut pos, mut current) = (0, root);
        while tokens.len() - pos >= p {
            let Some(child) = self.child(current, &tokens[pos..pos + p]) else { break };
            let m = self.common_len(&self.nodes[child as usize].key, &tokens[pos..]);
            pos += m;
            if m < self.nodes[child as usize].key.len() {
                break;
            }
            current = child;
        }
        pos
    }

    /// Splits `id` after `at` tokens. The new upper node takes the first `at` tokens and its
    /// data; `id` keeps the rest, its children, and its SSM state. Returns the upper node.
    fn split(&mut self, id: NodeId, at: usize) -> NodeId {
        let p = self.shape.page_size;
        debug_assert!(at > 0 && at < self.nodes[id as usize].key.len() && at.is_multiple_of(p));
        let parent = self.nodes[id as usize].parent;
        let first = self.nodes[id as usize].key[0];
        // The lower part keeps its place in the lists; only the sizes are redone.
        let linked = self.nodes[id as usize].linked;
        for c in [FULL, SWA, SSM] {
            let size = self.data_size(id, c);
            self.sizes.held[c] -= size;
            if linked[c] {
                self.sizes.evictable[c] -= size;
            }
        }
        let (upper_key, upper_full, upper_swa) = {
            let node = &mut self.nodes[id as usize];
            let lower_key = node.key.split_off(at);
            let upper_key = std::mem::replace(&mut node.key, lower_key);
            let upper_full = if node.full.is_empty() {
                Vec::new()
            } else {
                let lower = node.full.split_off(at / p);
                std::mem::replace(&mut node.full, lower)
            };
            let upper_swa = node.swa.as_mut().map(|pages| {
                let lower = pages.split_off(at / p);
                std::mem::replace(pages, lower)
            });
            (upper_key, upper_full, upper_swa)
        };
        let mut upper = Node::new(parent, upper_key);
        upper.full = upper_full;
        upper.swa = upper_swa;
        // Every receipt covering `id` also covers the upper part: full locks by path, SWA
        // segments once their tops move up below.
        upper.lock[FULL] = self.nodes[id as usize].lock[FULL];
        upper.lock[SWA] = self.nodes[id as usize].lock[SWA];
        upper.swa_tops = self.nodes[id as usize].swa_tops;
        let upper = self.alloc_node(upper);
        self.nodes[id as usize].swa_tops = 0;
        let lower_first = self.nodes[id as usize].key[0];
        self.nodes[parent as usize].children.replace(first, id, upper);
        self.nodes[upper as usize].children.add(lower_first, id);
        self.nodes[id as usize].parent = upper;
        if self.nodes[upper as usize].swa_tops > 0 {
            for top in self.swa_receipt_tops.values_mut() {
                if *top == id {
                    *top = upper;
                }
            }
        }
        for c in [FULL, SWA, SSM] {
            self.add_held(id, c);
            self.add_held(upper, c);
            if linked[c] {
                self.sizes.evictable[c] += self.data_size(id, c);
            }
            if self.should_link(upper, c) {
                if linked[c] { self.link_before(upper, id, c) } else { self.link_front(upper, c) }
            }
        }
        upper
    }

    /// The longest prefix of `tokens` that every component accepts: full data along the path,
    /// a live SWA window behind the end, SSM state on the end node. Splits a node when the
    /// match ends inside it, and touches the path.
    pub(crate) fn match_prefix(&mut self, root: NodeId, tokens: &[u32]) -> Matched {
        let p = self.shape.page_size;
        let (mut pos, mut current, mut live_run) = (0usize, root, 0usize);
        let mut best = Matched { len: 0, last: root };
        let mut best_inside: Option<(NodeId, usize)> = None;
        while tokens.len() - pos >= p {
            let Some(child) = self.child(current, &tokens[pos..pos + p]) else { break };
            let node = &self.nodes[child as usize];
            let m = self.common_len(&node.key, &tokens[pos..]);
            let whole = m == node.key.len();
            let end = pos + m;
            if self.shape.swa {
                live_run = if node.swa.is_some() { live_run + m } else { 0 };
            }
            let swa_ok = !self.shape.swa || live_run >= self.shape.window || live_run == end;
            let ssm_ok = !self.shape.ssm || (whole && node.ssm.is_some());
            let any_data = self.shape.full || node.swa.is_some() || node.ssm.is_some();
            if swa_ok && ssm_ok && any_data {
                best = Matched { len: end, last: child };
                best_inside = (!whole).then_some((child, m));
            }
            if !whole {
                break;
            }
            pos = end;
            current = child;
        }
        if let Some((node, at)) = best_inside {
            best.last = self.split(node, at);
        }
        self.touch_path(best.last);
        best
    }

    /// Node ids from the root's child down to `last`.
    pub(crate) fn path(&self, last: NodeId, out: &mut Vec<NodeId>) {
        out.clear();
        let mut id = last;
        while id != NIL && !self.is_root(id) {
            out.push(id);
            id = self.nodes[id as usize].parent;
        }
        out.reverse();
    }

    pub(crate) fn key_len(&self, id: NodeId) -> usize {
        self.nodes[id as usize].key.len()
    }

    pub(crate) fn full_pages(&self, id: NodeId) -> &[u32] {
        &self.nodes[id as usize].full
    }

    pub(crate) fn swa_pages(&self, id: NodeId) -> Option<&[u32]> {
        self.nodes[id as usize].swa.as_deref()
    }

    pub(crate) fn ssm_slot(&self, id: NodeId) -> Option<u32> {
        self.nodes[id as usize].ssm
    }

    // ----- locks -----------------------------------------------------------------------------

    fn lock_one(&mut self, id: NodeId, c: usize) {
        let node = &mut self.nodes[id as usize];
        node.lock[c] += 1;
        if node.lock[c] == 1 {
            self.unlink(id, c);
        }
    }

    fn unlock_one(&mut self, id: NodeId, c: usize) {
        let node = &mut self.nodes[id as usize];
        debug_assert!(node.lock[c] > 0, "lock count below zero");
        node.lock[c] = node.lock[c].saturating_sub(1);
        if node.lock[c] == 0 {
            self.relink(id, c, true);
        }
    }

    /// Locks the path to `last` (`id` names the receipt for split bookkeeping).
    pub(crate) fn lock(&mut self, last: NodeId, id: u64) -> Receipt {
        let mut receipt = Receipt { last, swa_top: NIL, ssm: false, swa_start: 0 };
        if self.is_root(last) {
            return receipt;
        }
        // One walk to the root locks the path and measures it (the SWA segment's start needs it).
        let (mut node, mut end) = (last, 0usize);
        while !self.is_root(node) {
            self.lock_one(node, FULL);
            end += self.key_len(node);
            node = self.nodes[node as usize].parent;
        }
        if self.shape.swa {
            let (mut node, mut covered) = (last, 0usize);
            loop {
                self.lock_one(node, SWA);
                covered += self.key_len(node);
                end -= self.key_len(node);
                receipt.swa_top = node;
                let parent = self.nodes[node as usize].parent;
                if covered >= self.shape.window || self.is_root(parent) {
                    break;
                }
                node = parent;
            }
            receipt.swa_start = end;
            self.nodes[receipt.swa_top as usize].swa_tops += 1;
            self.swa_receipt_tops.insert(id, receipt.swa_top);
        }
        if self.shape.ssm && self.nodes[last as usize].ssm.is_some() {
            self.lock_one(last, SSM);
            receipt.ssm = true;
        }
        receipt
    }

    /// Releases only the SWA part of a receipt (the request moved past the window).
    pub(crate) fn unlock_swa(&mut self, receipt: &mut Receipt, id: u64) {
        if receipt.swa_top == NIL {
            return;
        }
        let top = self.swa_receipt_tops.remove(&id).unwrap_or(receipt.swa_top);
        let mut node = receipt.last;
        loop {
            self.unlock_one(node, SWA);
            if node == top {
                break;
            }
            node = self.nodes[node as usize].parent;
        }
        self.nodes[top as usize].swa_tops -= 1;
        receipt.swa_top = NIL;
    }

    /// Releases everything a receipt holds.
    pub(crate) fn unlock(&mut self, mut receipt: Receipt, id: u64) {
        if self.is_root(receipt.last) {
            return;
        }
        self.unlock_swa(&mut receipt, id);
        if receipt.ssm {
            self.unlock_one(receipt.last, SSM);
        }
        let mut node = receipt.last;
        while !self.is_root(node) {
            self.unlock_one(node, FULL);
            node = self.nodes[node as usize].parent;
        }
    }

    // ----- insert ----------------------------------------------------------------------------

    fn new_child(&mut self, parent: NodeId, key: Vec<u32>, full: Vec<u32>, swa: Option<Vec<u32>>) -> NodeId {
        let first = key[0];
        let mut node = Node::new(parent, key);
        node.full = full;
        node.swa = swa;
        let id = self.alloc_node(node);
        self.nodes[parent as usize].children.add(first, id);
        for c in [FULL, SWA, SSM] {
            self.add_held(id, c);
            self.relink(id, c, true);
        }
        id
    }

    /// Inserts page-aligned `tokens` with the request's data. Spans the tree already holds keep
    /// the tree's data, except that SWA tombstones the request has live pages for are healed
    /// with them; the rest becomes new nodes owning the request's pages. The SSM slot goes to
    /// the end node if that node has no state yet.
    ///
    /// The first `must_match` tokens must follow whole nodes already in the tree (the request's
    /// locked prefix); if they do not, nothing is changed and the divergence point is returned.
    /// Nothing is mutated before that check passes: inside a locked prefix there is nothing to
    /// split and no tombstone the request holds live pages for.
    pub(crate) fn insert(
        &mut self,
        root: NodeId,
        tokens: &[u32],
        data: InsertData<'_>,
        must_match: usize,
    ) -> Result<Inserted, usize> {
        let p = self.shape.page_size;
        debug_assert!(tokens.len().is_multiple_of(p));
        let (mut pos, mut current) = (0usize, root);
        let swa_live_from = data.swa_from * p;
        let swa_page = |page: usize| data.swa[page - data.swa_from];
        let mut reused = 0;
        while pos < tokens.len() {
            let Some(mut child) = self.child(current, &tokens[pos..pos + p]) else {
                if pos < must_match {
                    return Err(pos);
                }
                current = self.insert_new(current, tokens, pos, &data);
                pos = tokens.len();
                break;
            };
            let m = self.common_len(&self.nodes[child as usize].key, &tokens[pos..]);
            if pos < must_match && m < self.key_len(child) {
                return Err(pos + m);
            }
            if m < self.key_len(child) {
                child = self.split(child, m);
            }
            reused += m;
            let end = pos + m;
            if self.shape.swa && self.nodes[child as usize].swa.is_none() && swa_live_from < end {
                let heal_from = swa_live_from.max(pos);
                if heal_from > pos {
                    self.split(child, heal_from - pos);
                }
                let healed: Vec<u32> = (heal_from / p..end / p).map(swa_page).collect();
                self.set_swa(child, Some(healed));
            }
            pos = end;
            current = child;
        }
        debug_assert_eq!(pos, tokens.len());
        let mut took_ssm = false;
        if let Some(slot) = data.ssm
            && !self.is_root(current)
            && self.nodes[current as usize].ssm.is_none()
        {
            self.set_ssm(current, Some(slot));
            took_ssm = true;
        }
        // Without a full pool a new leaf can end up holding nothing; no list could ever evict it.
        let mut nothing = Freed::default();
        while !self.is_root(current)
            && self.is_leaf(current)
            && self.nodes[current as usize].lock[FULL] == 0
            && (0..3).all(|c| !self.has_data(current, c))
        {
            let parent = self.nodes[current as usize].parent;
            self.delete_leaf(current, &mut nothing);
            current = parent;
        }
        self.touch_path(current);
        Ok(Inserted { last: current, reused, took_ssm })
    }

    /// New nodes for `tokens[pos..]` under `parent`: one node, or two when the SWA pages start
    /// inside the span (a tombstoned part, then a live part).
    fn insert_new(&mut self, parent: NodeId, tokens: &[u32], pos: usize, data: &InsertData<'_>) -> NodeId {
        let p = self.shape.page_size;
        let swa_live_from = (data.swa_from * p).max(pos);
        let has_full = self.shape.full;
        let full_of = |from: usize, to: usize| {
            if has_full { data.full[from / p..to / p].to_vec() } else { Vec::new() }
        };
        let mut at = parent;
        if self.shape.swa && swa_live_from > pos {
            let split = swa_live_from.min(tokens.len());
            at = self.new_child(at, tokens[pos..split].to_vec(), full_of(pos, split), None);
            if split == tokens.len() {
                return at;
            }
        }
        let from = if self.shape.swa { swa_live_from } else { pos };
        let swa = self.shape.swa.then(|| data.swa[from / p - data.swa_from..tokens.len() / p - data.swa_from].to_vec());
        self.new_child(at, tokens[from..].to_vec(), full_of(from, tokens.len()), swa)
    }

    // ----- eviction --------------------------------------------------------------------------

    fn is_leaf(&self, id: NodeId) -> bool {
        self.nodes[id as usize].children.is_empty()
    }

    /// A childless node no match can end in: an auxiliary component lacks data on it.
    fn useless(&self, id: NodeId) -> bool {
        let node = &self.nodes[id as usize];
        (self.shape.swa && node.swa.is_none())
            || (self.shape.ssm && node.ssm.is_none())
            || (!self.shape.full && node.swa.is_none() && node.ssm.is_none())
    }

    /// Removes an unlocked leaf and gives its data back.
    fn delete_leaf(&mut self, id: NodeId, freed: &mut Freed) {
        debug_assert!(self.is_leaf(id) && self.nodes[id as usize].lock[FULL] == 0);
        for c in [FULL, SWA, SSM] {
            self.unlink(id, c);
            self.sub_held(id, c);
        }
        let node = &mut self.nodes[id as usize];
        freed.full.append(&mut node.full);
        if let Some(mut pages) = node.swa.take() {
            freed.swa.append(&mut pages);
        }
        if let Some(slot) = node.ssm.take() {
            freed.ssm.push(slot);
        }
        let (parent, first) = (node.parent, node.key[0]);
        self.nodes[parent as usize].children.remove(first, id);
        self.release_node(id);
    }

    /// Deletes `id` and then every ancestor left as a useless, unlocked leaf.
    fn delete_cascading(&mut self, id: NodeId, freed: &mut Freed) {
        let mut parent = self.nodes[id as usize].parent;
        self.delete_leaf(id, freed);
        while !self.is_root(parent)
            && self.is_leaf(parent)
            && self.nodes[parent as usize].lock[FULL] == 0
            && self.useless(parent)
        {
            let next = self.nodes[parent as usize].parent;
            self.delete_leaf(parent, freed);
            parent = next;
        }
    }

    /// Evicts least-recently-used data of `component` until `target` units (tokens, or ssm
    /// slots) are freed or nothing evictable is left. Returns the units freed of that component.
    pub(crate) fn evict(&mut self, component: Component, target: usize, freed: &mut Freed) -> usize {
        let c = component as usize;
        let p = self.shape.page_size;
        let units = |freed: &Freed| match c {
            FULL => freed.full.len() * p,
            SWA => freed.swa.len() * p,
            _ => freed.ssm.len(),
        };
        let before = units(freed);
        while units(freed) - before < target {
            let id = self.tail[c];
            if id == NIL {
                break;
            }
            let deletable = self.is_leaf(id) && self.nodes[id as usize].lock[FULL] == 0;
            match c {
                FULL => {
                    debug_assert!(deletable, "the full list's tail is always an unlocked leaf");
                    if !deletable {
                        // Never evict full data of an inner node; drop it from the list instead.
                        self.unlink(id, FULL);
                        continue;
                    }
                    self.delete_cascading(id, freed);
                }
                _ if deletable => self.delete_cascading(id, freed),
                SWA => {
                    if let Some(mut pages) = self.set_swa(id, None) {
                        freed.swa.append(&mut pages);
                    }
                    // Lower priorities go with it: SSM state behind a dead window is unreachable.
                    if self.shape.ssm && self.nodes[id as usize].lock[SSM] == 0 {
                        freed.ssm.extend(self.set_ssm(id, None));
                    }
                }
                _ => freed.ssm.extend(self.set_ssm(id, None)),
            }
        }
        units(freed) - before
    }

    // ----- inspection for invariant checks -------------------------------------------------

    /// Every page and slot the tree owns, and a recount of `TreeSizes`, for invariant checks.
    pub(crate) fn audit(&self) -> Result<(Freed, TreeSizes), String> {
        let mut owned = Freed::default();
        let mut sizes = TreeSizes::default();
        let p = self.shape.page_size;
        for (id, node) in self.nodes.iter().enumerate() {
            let id = id as NodeId;
            if !node.live || node.parent == NIL {
                continue;
            }
            if node.key.is_empty() || !node.key.len().is_multiple_of(p) {
                return Err(format!("node {id} has a key of {} tokens (page size {p})", node.key.len()));
            }
            if self.shape.full && node.full.len() * p != node.key.len() {
                return Err(format!("node {id} has {} full pages for {} tokens", node.full.len(), node.key.len()));
            }
            if let Some(swa) = &node.swa
                && swa.len() * p != node.key.len()
            {
                return Err(format!("node {id} has {} swa pages for {} tokens", swa.len(), node.key.len()));
            }
            let parent = &self.nodes[node.parent as usize];
            if !parent.live || !parent.children.ids().any(|c| c == id) {
                return Err(format!("node {id} is not among its parent's children"));
            }
            if node.lock[FULL] > parent.lock[FULL] && parent.parent != NIL {
                return Err(format!("node {id} holds more full locks than its parent"));
            }
            owned.full.extend_from_slice(&node.full);
            owned.swa.extend(node.swa.iter().flatten());
            owned.ssm.extend(node.ssm);
            for c in [FULL, SWA, SSM] {
                let size = self.data_size(id, c);
                sizes.held[c] += size;
                let should = self.should_link(id, c);
                if should != node.linked[c] {
                    return Err(format!("node {id}: list {c} membership is {} but should be {should}", node.linked[c]));
                }
                if should {
                    sizes.evictable[c] += size;
                }
            }
        }
        for c in [FULL, SWA, SSM] {
            let (mut id, mut prev, mut count) = (self.head[c], NIL, 0usize);
            while id != NIL {
                if self.nodes[id as usize].prev[c] != prev {
                    return Err(format!("list {c} is broken at node {id}"));
                }
                if c == FULL && !self.is_leaf(id) && self.nodes[id as usize].next[c] == NIL {
                    return Err(format!("the full list's tail {id} is not a leaf"));
                }
                count += 1;
                prev = id;
                id = self.nodes[id as usize].next[c];
            }
            if prev != self.tail[c] {
                return Err(format!("list {c} tail is wrong"));
            }
            let linked = self.nodes.iter().filter(|n| n.live && n.linked[c]).count();
            if count != linked {
                return Err(format!("list {c} holds {count} nodes but {linked} are marked linked"));
            }
        }
        if sizes != self.sizes {
            return Err(format!("tree sizes {:?} but recounted {:?}", self.sizes, sizes));
        }
        Ok((owned, sizes))
    }

    /// Lock counts per node (for invariant checks against the live receipts).
    pub(crate) fn lock_counts(&self) -> Vec<(NodeId, [u32; 3])> {
        self.nodes
            .iter()
            .enumerate()
            .filter(|(_, n)| n.live && n.parent != NIL)
            .map(|(id, n)| (id as NodeId, n.lock))
            .collect()
    }

    /// The node a receipt's SWA segment starts at, as splits have moved it.
    pub(crate) fn swa_top(&self, receipt_id: u64) -> Option<NodeId> {
        self.swa_receipt_tops.get(&receipt_id).copied()
    }

    pub(crate) fn parent(&self, id: NodeId) -> NodeId {
        self.nodes[id as usize].parent
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn shape(page_size: usize) -> TreeShape {
        TreeShape { page_size, full: true, swa: false, ssm: false, window: 0 }
    }

    fn insert(tree: &mut Tree, tokens: &[u32], first_page: u32) -> NodeId {
        let pages: Vec<u32> = (0..(tokens.len() / tree.shape.page_size) as u32).map(|p| first_page + p).collect();
        let data = InsertData { full: &pages, swa_from: 0, swa: &[], ssm: None };
        tree.insert(0, tokens, data, 0).unwrap().last
    }

    #[test]
    fn siblings_sharing_a_first_token_are_told_apart_by_their_whole_first_page() {
        let mut tree = Tree::new(shape(4));
        let a = insert(&mut tree, &[1, 2, 3, 4, 5, 6, 7, 8], 0);
        let b = insert(&mut tree, &[1, 2, 3, 9, 5, 6, 7, 8], 10);
        assert_ne!(a, b);
        assert_eq!(tree.nodes[0].children.by_first_token.len() + tree.nodes[0].children.extra.len(), 2);
        assert_eq!(tree.match_prefix(0, &[1, 2, 3, 9, 5, 6, 7, 8]), Matched { len: 8, last: b });
        assert_eq!(tree.match_prefix(0, &[1, 2, 3, 4, 0, 0, 0, 0]).len, 4, "splits a after its first page");
        tree.match_prefix(0, &[1, 2, 3, 9, 5, 6, 7, 8]);
        // Evicting a (both halves, older than b) promotes the sibling waiting in `extra`.
        let mut freed = Freed::default();
        assert_eq!(tree.evict(Component::Full, 8, &mut freed), 8);
        assert_eq!(tree.match_prefix(0, &[1, 2, 3, 9, 5, 6, 7, 8]).len, 8, "b was used last and survives");
        assert!(tree.nodes[0].children.extra.is_empty());
        tree.audit().unwrap();
    }

    #[test]
    fn the_full_list_tail_is_always_an_evictable_leaf() {
        let mut tree = Tree::new(shape(1));
        insert(&mut tree, &[1, 2, 3, 4], 0);
        insert(&mut tree, &[1, 2, 9, 9], 10);
        insert(&mut tree, &[1, 2, 3, 4, 5], 20);
        let mut freed = Freed::default();
        // Leaves go first, least recent first; inner nodes only once they are leaves.
        assert_eq!(tree.evict(Component::Full, 1, &mut freed), 2, "the [9, 9] leaf");
        assert_eq!(tree.evict(Component::Full, 1, &mut freed), 1, "then [5]");
        assert_eq!(tree.evict(Component::Full, 100, &mut freed), 4, "then what is left");
        assert_eq!(tree.node_count(), 0);
        let mut pages = freed.full.clone();
        pages.sort_unstable();
        assert_eq!(pages, [0, 1, 2, 3, 12, 13, 24], "every page given back once");
        tree.audit().unwrap();
    }
}
