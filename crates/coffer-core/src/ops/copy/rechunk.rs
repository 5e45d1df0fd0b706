//! Copying into an unrelated repository (different id and chunker keys, or
//! different chunker sizes): every file of the source snapshots is read through
//! the source's trees and blobs, checked against its digest, and cut again by
//! the destination's chunker, so that the destination deduplicates it with its
//! own backups; new trees keep every node's metadata, and each snapshot is
//! written anew, signed by the destination's writer, with the source's Merkle
//! root, which the new trees reproduce (docs/design.md#copy, "Unrelated
//! repositories").

use std::collections::{HashMap, HashSet};
use std::path::Path;

use rayon::prelude::*;

use crate::crypto::sign::{PublicKey, SigningKey};
use crate::error::{Error, Result};
use crate::format::ObjectKind;
use crate::format::pack::{BlobType, PackEntry};
use crate::format::snapshot::{CopiedFrom, SNAPSHOT_VERSION, Snapshot};
use crate::format::tree::{self, ListingWriter, Node, NodeKind, SplitLimits};
use crate::id::Id;
use crate::progress::Progress;
use crate::repo::{BlobSaver, PackInfo, Repository, SaverEvent, TreeNodes};

use super::{CopySummary, Sent};

/// Source blobs within this distance of each other in one pack are read in one
/// request (as a restore does).
const READ_GAP: u64 = 1 << 20;
/// One read of a source pack covers at most this many bytes.
const READ_MAX: u64 = 16 << 20;
/// Source bytes fetched ahead, in parallel, while a file is cut again.
const READ_AHEAD: u64 = 32 << 20;

/// Source snapshots copied already, and the destination snapshots whose files
/// may be reused.
type Copied = (HashSet<Id>, Vec<(Id, Snapshot)>);

/// The source snapshots an earlier copy wrote into `dst` (by the `copied_from`
/// of the destination's snapshots), and the destination snapshots written so by
/// `trusted`, the newest last: their files' content can be reused.
pub(super) fn copied(src: &Repository, dst: &Repository, trusted: Option<&PublicKey>) -> Result<Copied> {
    let (snaps, _) = dst.snapshots()?;
    let mut done = HashSet::new();
    let mut own = Vec::new();
    for (id, s) in snaps {
        let Some(c) = s.copied_from.as_ref().filter(|c| c.repository == src.config().id) else { continue };
        done.insert(c.snapshot);
        if trusted.is_some_and(|k| *k == s.writer) && s.signature.is_valid() {
            own.push((id, s));
        }
    }
    Ok((done, own))
}

/// One source blob to read: where it lies.
struct Located {
    entry: PackEntry,
    pack: PackInfo,
}

/// Blobs of one file read from one pack in one request.
struct Run {
    pack: PackInfo,
    start: u64,
    end: u64,
    /// Indices into the file's blob list.
    blobs: Vec<usize>,
}

/// What the copy of one set of snapshots keeps between files.
struct Rechunker<'a> {
    src: &'a Repository,
    dst: &'a Repository,
    saver: &'a BlobSaver<'a>,
    progress: &'a dyn Progress,
    limits: SplitLimits,
    cut_key: [u8; 32],
    /// Source tree id -> destination tree id, for directories done already.
    trees: HashMap<Id, Id>,
    /// File digest -> destination content (data blob ids), for files stored
    /// already, by this run or by an earlier copy this client signed.
    files: HashMap<Id, Vec<Id>>,
    /// Source index files loaded, to find the new ones after a prune.
    index_seen: HashSet<Id>,
    files_read: u64,
    files_reused: u64,
    bytes_read: u64,
}

/// A directory being rewritten: its source entries, the new listing, and the
/// node that will point at it in its parent (none for the root).
struct Frame<'r> {
    nodes: TreeNodes<'r>,
    listing: ListingWriter,
    src: Id,
    node: Option<Node>,
}

/// Stores the files and trees of `snaps` (oldest first) in `dst`, cut by its
/// chunker, then a new snapshot for each, signed by `key`, each linking to the
/// heads before it. `reuse` are destination snapshots an earlier copy wrote
/// (signed by `key`'s writer): the content of their files is reused by digest.
/// A dry run (`key` is `None`) reads and cuts everything and stores nothing.
/// The caller has loaded the destination's index.
#[allow(clippy::too_many_arguments)]
pub(super) fn copy_snapshots(
    src: &Repository,
    dst: &Repository,
    snaps: &[(Id, Snapshot)],
    origins: &HashMap<Id, CopiedFrom>,
    reuse: &[(Id, Snapshot)],
    key: Option<&SigningKey>,
    report: &(dyn Fn(SaverEvent) + Sync),
    progress: &dyn Progress,
    sum: &mut CopySummary,
) -> Result<()> {
    for e in src.load_index()? {
        sum.warnings.push(format!("source {e}; the blobs only it lists are not found"));
    }
    let index_seen = src.list_ids(ObjectKind::Index)?.into_iter().collect();
    let saver = match key {
        Some(_) => BlobSaver::new(dst).with_observer(report),
        None => BlobSaver::dry_run(dst),
    };
    let mut r = Rechunker {
        src,
        dst,
        saver: &saver,
        progress,
        limits: SplitLimits::default(),
        cut_key: dst.tree_cut_key(),
        trees: HashMap::new(),
        files: HashMap::new(),
        index_seen,
        files_read: 0,
        files_reused: 0,
        bytes_read: 0,
    };
    // The newest earlier copy of each host and path set the copy brings.
    let mut wanted: Vec<(&str, &[String])> = Vec::new();
    for (_, s) in snaps {
        if !wanted.contains(&(s.hostname.as_str(), s.paths.as_slice())) {
            wanted.push((s.hostname.as_str(), s.paths.as_slice()));
        }
    }
    for (host, paths) in wanted {
        if let Some((_, s)) = reuse.iter().rev().find(|(_, s)| s.hostname == host && s.paths == paths) {
            r.learn(s.tree)?;
        }
    }
    let mut trees = Vec::with_capacity(snaps.len());
    for (id, snap) in snaps {
        // A prune of the source may move what a snapshot uses while it is read:
        // the snapshot is read again once with the index files stored since.
        let mut tree = r.tree(snap.tree);
        if matches!(tree, Err(Error::Corrupt { .. })) && r.refresh_index()? {
            tree = r.tree(snap.tree);
        }
        match tree {
            Ok(t) => trees.push(Some(t)),
            Err(Error::Corrupt { .. }) if gone(src, id)? => {
                sum.warnings.push(format!(
                    "snapshot {} was forgotten in the source while it was copied: it was not copied",
                    id.short()
                ));
                sum.snapshots.retain(|s| s != id);
                trees.push(None);
            }
            Err(e @ Error::Corrupt { .. }) if r.source_changed()? => {
                return Err(Error::SourceChanged(in_snapshot(e, id).to_string()));
            }
            Err(e) => return Err(in_snapshot(e, id)),
        }
    }
    sum.files_read = r.files_read;
    sum.files_reused = r.files_reused;
    sum.bytes_read = r.bytes_read;
    let stats = saver.finish()?;
    sum.blobs = Sent { objects: stats.blobs, bytes: stats.bytes_new };
    sum.packs = Sent { objects: stats.packs, bytes: stats.bytes_stored };
    let Some(key) = key else {
        return Ok(());
    };
    let copies = snaps.iter().zip(trees).filter_map(|((id, snap), tree)| {
        Some((*id, Snapshot { version: SNAPSHOT_VERSION, tree: tree?, ..snap.clone() }))
    });
    super::reencrypt::write_snapshots(dst, key, origins, copies, progress, sum)
}

/// Whether source snapshot `id` is gone (forgotten since it was listed).
fn gone(src: &Repository, id: &Id) -> Result<bool> {
    match src.backend().stat(&ObjectKind::Snapshot.path(id)) {
        Ok(_) => Ok(false),
        Err(e) if e.kind == coffer_backend::ErrorKind::NotFound => Ok(true),
        Err(e) => Err(e.into()),
    }
}

/// Names the snapshot an error happened in.
fn in_snapshot(e: Error, id: &Id) -> Error {
    match e {
        Error::Corrupt { object, detail } => {
            Error::Corrupt { object: format!("source {object} (in snapshot {})", id.short()), detail }
        }
        e => e,
    }
}

impl<'a> Rechunker<'a> {
    /// Remembers the content of every file of the destination tree `root` whose
    /// blobs the destination's index holds, by digest.
    fn learn(&mut self, root: Id) -> Result<()> {
        let mut stack = vec![self.dst.tree_nodes(&root)?];
        while let Some(top) = stack.last_mut() {
            let Some(node) = top.next() else {
                stack.pop();
                continue;
            };
            let node = node?;
            match node.kind {
                NodeKind::Dir => {
                    if let Some(sub) = node.subtree {
                        stack.push(self.dst.tree_nodes(&sub)?);
                    }
                }
                NodeKind::File => {
                    let Some(digest) = node.digest else { continue };
                    if self.files.contains_key(&digest) {
                        continue;
                    }
                    let content = self.dst.resolve_content(&node, &mut |_| {})?;
                    let idx = self.dst.index();
                    if content.iter().all(|id| idx.contains(id, BlobType::Data)) {
                        drop(idx);
                        self.files.insert(digest, content);
                    }
                }
                _ => {}
            }
        }
        Ok(())
    }

    /// Writes the source tree `root` into the destination; returns its new id.
    fn tree(&mut self, root: Id) -> Result<Id> {
        if let Some(id) = self.trees.get(&root) {
            return Ok(*id);
        }
        let (src, cut_key, limits) = (self.src, self.cut_key, self.limits);
        let frame = |id: Id, node: Option<Node>| -> Result<Frame<'a>> {
            Ok(Frame { nodes: src.tree_nodes(&id)?, listing: ListingWriter::new(cut_key, limits), src: id, node })
        };
        let mut stack = vec![frame(root, None)?];
        loop {
            let top = stack.last_mut().expect("the root frame is popped last");
            match top.nodes.next() {
                Some(node) => {
                    let mut node = node?;
                    match node.kind {
                        NodeKind::Dir => {
                            let sub = node.subtree.ok_or_else(|| {
                                Error::corrupt(
                                    format!("tree {}", top.src.short()),
                                    format!("directory {:?} has no subtree", node.name.display()),
                                )
                            })?;
                            if let Some(done) = self.trees.get(&sub) {
                                node.subtree = Some(*done);
                                let saver = self.saver;
                                top.listing.push(&node, &mut |b| Ok::<_, Error>(saver.save(BlobType::Tree, b)?.0))?;
                            } else {
                                stack.push(frame(sub, Some(node))?);
                            }
                        }
                        NodeKind::File => {
                            self.file(&mut node)?;
                            let saver = self.saver;
                            let top = stack.last_mut().expect("a frame");
                            top.listing.push(&node, &mut |b| Ok::<_, Error>(saver.save(BlobType::Tree, b)?.0))?;
                        }
                        _ => {
                            let saver = self.saver;
                            top.listing.push(&node, &mut |b| Ok::<_, Error>(saver.save(BlobType::Tree, b)?.0))?;
                        }
                    }
                }
                None => {
                    let done = stack.pop().expect("a frame");
                    let saver = self.saver;
                    let id = done.listing.finish(&mut |b| Ok::<_, Error>(saver.save(BlobType::Tree, b)?.0))?;
                    self.trees.insert(done.src, id);
                    match (done.node, stack.last_mut()) {
                        (Some(mut node), Some(parent)) => {
                            node.subtree = Some(id);
                            parent.listing.push(&node, &mut |b| Ok::<_, Error>(saver.save(BlobType::Tree, b)?.0))?;
                        }
                        _ => return Ok(id),
                    }
                }
            }
        }
    }

    /// Replaces a file node's content by the destination's: reused by digest, or
    /// read from the source, checked against the digest and cut again.
    fn file(&mut self, node: &mut Node) -> Result<()> {
        let what = || format!("file {:?}", node.name.display());
        let digest = node.digest.ok_or_else(|| Error::corrupt(what(), "a regular file without a digest"))?;
        let content = match self.files.get(&digest) {
            Some(c) => {
                self.files_reused += 1;
                c.clone()
            }
            None => {
                let ids = self.src.resolve_content(node, &mut |_| {})?;
                let (content, hash) = self.read_and_cut(&ids)?;
                if hash != digest {
                    return Err(Error::corrupt(
                        what(),
                        format!(
                            "its content hashes to {} instead of its digest {}, so it was not copied; run `coffer \
                             check --read-data` on the source",
                            hash.short(),
                            digest.short()
                        ),
                    ));
                }
                self.files_read += 1;
                self.files.insert(digest, content.clone());
                content
            }
        };
        let saver = self.saver;
        node.content_parts =
            tree::content_parts(&content, &self.limits, &mut |b| Ok::<_, Error>(saver.save(BlobType::Tree, b)?.0))?;
        node.content = if node.content_parts.is_empty() { content } else { Vec::new() };
        self.progress.add_item(Path::new(&node.name.display().to_string()));
        Ok(())
    }

    /// Reads the source blobs `ids` in order (neighbours in a pack in one
    /// request, several requests in flight), cuts their concatenation with the
    /// destination's chunker and saves the chunks; returns the new content and
    /// the BLAKE3 of the bytes read.
    fn read_and_cut(&mut self, ids: &[Id]) -> Result<(Vec<Id>, Id)> {
        let located = self.locate(ids)?;
        let runs = plan_runs(&located);
        let chunker = self.dst.chunker();
        let max = chunker.params().max_size as usize;
        let mut hasher = blake3::Hasher::new();
        let mut buf: Vec<u8> = Vec::new();
        let mut out = Vec::new();
        let mut i = 0;
        while i < runs.len() {
            // A window of runs read in parallel.
            let mut j = i;
            let mut bytes = 0;
            while j < runs.len() && (j == i || bytes + runs[j].end - runs[j].start <= READ_AHEAD) {
                bytes += runs[j].end - runs[j].start;
                j += 1;
            }
            let read = self.src.fetch_many(&runs[i..j], |run| self.read_run(run, ids, &located));
            for blobs in read {
                for data in self.retry_missing(blobs?, ids)? {
                    hasher.update(&data);
                    self.bytes_read += data.len() as u64;
                    self.progress.add_bytes(data.len() as u64);
                    buf.extend_from_slice(&data);
                }
                // Cut what is certain: every chunk with at least `max` bytes after
                // its start, in parallel.
                if buf.len() >= max + (8 << 20) {
                    let taken = self.cut_and_save(&buf, false, &mut out)?;
                    buf.drain(..taken);
                }
            }
            i = j;
        }
        self.cut_and_save(&buf, true, &mut out)?;
        Ok((out, Id(*hasher.finalize().as_bytes())))
    }

    /// Cuts `buf` into chunks (all of it when `end`, else those whose boundary is
    /// certain), saves them in parallel, appends their ids; returns the bytes cut.
    fn cut_and_save(&self, buf: &[u8], end: bool, out: &mut Vec<Id>) -> Result<usize> {
        let chunker = self.dst.chunker();
        let max = chunker.params().max_size as usize;
        let mut pieces = Vec::new();
        let mut pos = 0;
        while pos < buf.len() && (end || buf.len() - pos >= max) {
            let n = chunker.cut(&buf[pos..]);
            pieces.push(&buf[pos..pos + n]);
            pos += n;
        }
        let ids: Vec<Result<Id>> = pieces.par_iter().map(|c| Ok(self.saver.save(BlobType::Data, c)?.0)).collect();
        for id in ids {
            out.push(id?);
        }
        Ok(pos)
    }

    /// Where each of `ids` lies in the source; blobs the index lacks are looked
    /// for in index files written since it was loaded (a prune's).
    fn locate(&mut self, ids: &[Id]) -> Result<Vec<Located>> {
        let mut out = Vec::with_capacity(ids.len());
        for id in ids {
            let found = match self.src.locate_blob(BlobType::Data, id) {
                Ok(l) => l,
                Err(_) => {
                    self.refresh_index()?;
                    self.src.locate_blob(BlobType::Data, id)?
                }
            };
            out.push(Located { entry: found.0, pack: found.1 });
        }
        Ok(out)
    }

    /// Loads the source index files stored since the copy started.
    fn refresh_index(&mut self) -> Result<bool> {
        let mut new: Vec<Id> =
            self.src.list_ids(ObjectKind::Index)?.into_iter().filter(|i| !self.index_seen.contains(i)).collect();
        if new.is_empty() {
            return Ok(false);
        }
        new.sort();
        self.index_seen.extend(&new);
        // A file gone again meanwhile is not needed: its replacement is listed next time.
        let _ = self.src.load_index_files(&new);
        Ok(true)
    }

    /// The blobs of one run in order; a blob that could not be read from it is
    /// `Err` (read again, from another copy, by [`Self::retry_missing`]). A
    /// storage error fails the whole run.
    fn read_run(&self, run: &Run, ids: &[Id], located: &[Located]) -> Result<Vec<(usize, Result<Vec<u8>>)>> {
        let sealed = match self.src.read_pack_range(&run.pack, run.start, run.end - run.start) {
            Ok(b) => Ok(b),
            Err(e @ Error::Backend(_)) => return Err(e),
            Err(e) => Err(e.to_string()),
        };
        Ok(run
            .blobs
            .iter()
            .map(|&b| {
                let l = &located[b];
                let data = match &sealed {
                    Ok(bytes) => {
                        let at = (l.entry.offset - run.start) as usize;
                        let part = &bytes[at..at + l.entry.length as usize];
                        self.src.decode_blob(&l.pack, &l.entry, part)
                    }
                    Err(e) => Err(Error::corrupt(format!("data blob {}", ids[b].short()), e.clone())),
                };
                (b, data)
            })
            .collect())
    }

    /// The data of one run's blobs; each that failed is read again through the
    /// index (another copy), then after loading the index files a prune of the
    /// source wrote meanwhile. A blob no copy serves fails the copy: retryable
    /// when the source changed, damage otherwise.
    fn retry_missing(&mut self, blobs: Vec<(usize, Result<Vec<u8>>)>, ids: &[Id]) -> Result<Vec<Vec<u8>>> {
        let mut out = Vec::with_capacity(blobs.len());
        for (b, r) in blobs {
            let id = &ids[b];
            match r {
                Ok(d) => out.push(d),
                Err(e @ Error::Backend(_)) => return Err(e),
                Err(first) => {
                    let again = match self.src.load_blob(BlobType::Data, id) {
                        Ok(d) => Ok(d),
                        Err(e @ Error::Backend(_)) => return Err(e),
                        Err(_) if self.refresh_index()? => self.src.load_blob(BlobType::Data, id),
                        Err(e) => Err(e),
                    };
                    match again {
                        Ok(d) => out.push(d),
                        Err(e @ Error::Backend(_)) => return Err(e),
                        Err(_) if self.source_changed()? => {
                            return Err(Error::SourceChanged(format!(
                                "blob {} of the source could not be read: {first}",
                                id.short()
                            )));
                        }
                        Err(_) => return Err(first),
                    }
                }
            }
        }
        Ok(out)
    }

    /// Whether the source's index files changed since the copy started (a prune
    /// or a repair ran there).
    fn source_changed(&self) -> Result<bool> {
        let now: HashSet<Id> = self.src.list_ids(ObjectKind::Index)?.into_iter().collect();
        Ok(self.index_seen.iter().any(|i| !now.contains(i)) || now.iter().any(|i| !self.index_seen.contains(i)))
    }
}

/// Groups the blobs of one file into reads: consecutive blobs of one pack at
/// most [`READ_GAP`] apart, each read at most [`READ_MAX`] bytes (or one blob).
fn plan_runs(located: &[Located]) -> Vec<Run> {
    let mut runs: Vec<Run> = Vec::new();
    for (i, l) in located.iter().enumerate() {
        let (s, e) = (l.entry.offset, l.entry.offset + l.entry.length as u64);
        if let Some(r) = runs.last_mut()
            && r.pack.id == l.pack.id
            && s >= r.start
            && s <= r.end + READ_GAP
            && e.max(r.end) - r.start <= READ_MAX
        {
            r.end = r.end.max(e);
            r.blobs.push(i);
            continue;
        }
        runs.push(Run { pack: l.pack.clone(), start: s, end: e, blobs: vec![i] });
    }
    runs
}
