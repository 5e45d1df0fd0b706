//! A tar stream read on a thread of its own, its entries handed over in order,
//! each file with a reader of its content that may move between threads: the
//! import reads a file's next block on one thread while it stores the last on
//! another, which the tar reader's own content readers cannot do. The archive
//! is parsed and copied on that thread while the file before is chunked, so a
//! core does each.

use std::io::{self, Read};
use std::sync::mpsc::{Receiver, SyncSender, sync_channel};

use coffer_import::tar::{self as rtar, Entry, Kind, Limits};

/// The size of a block of content handed over.
const BLOCK: usize = 256 << 10;

/// Blocks in flight between the threads: what the reading thread may be ahead.
const IN_FLIGHT: usize = 8;

enum Msg {
    Entry(Box<Entry>),
    Data(Vec<u8>),
    /// The end of a file's content.
    End,
    /// The content could not be read: why.
    Fail(String),
}

/// The reader's end of the channel, as a file's content.
struct Content {
    rx: Receiver<Msg>,
    block: Vec<u8>,
    at: usize,
    done: bool,
}

impl Read for Content {
    fn read(&mut self, buf: &mut [u8]) -> io::Result<usize> {
        while self.at == self.block.len() {
            if self.done {
                return Ok(0);
            }
            match self.rx.recv() {
                Ok(Msg::Data(b)) => (self.block, self.at) = (b, 0),
                Ok(Msg::End) => self.done = true,
                Ok(Msg::Fail(why)) => {
                    self.done = true;
                    return Err(io::Error::other(why));
                }
                Ok(Msg::Entry(_)) | Err(_) => {
                    self.done = true;
                    return Err(io::Error::other("the archive's reader stopped in the middle of this file"));
                }
            }
        }
        let n = buf.len().min(self.block.len() - self.at);
        buf[..n].copy_from_slice(&self.block[self.at..self.at + n]);
        self.at += n;
        Ok(n)
    }
}

impl Content {
    /// Reads what is left of the file, so that the next message is an entry.
    fn drain(&mut self) {
        let mut sink = [0u8; 8192];
        while matches!(self.read(&mut sink), Ok(n) if n > 0) {}
    }
}

/// Why the reading thread stopped.
enum Stopped {
    /// The other end is gone: the callback failed.
    Closed,
    Tar(rtar::Error),
}

impl From<rtar::Error> for Stopped {
    fn from(e: rtar::Error) -> Self {
        Stopped::Tar(e)
    }
}

/// Sends each entry and, for a file, its content in blocks.
fn pump(tx: &SyncSender<Msg>, e: Entry, content: &mut dyn Read) -> Result<(), Stopped> {
    let file = e.kind == Kind::File;
    tx.send(Msg::Entry(Box::new(e))).map_err(|_| Stopped::Closed)?;
    if !file {
        return Ok(());
    }
    loop {
        let mut block = vec![0u8; BLOCK];
        let mut filled = 0;
        while filled < BLOCK {
            match content.read(&mut block[filled..]) {
                Ok(0) => break,
                Ok(n) => filled += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => {
                    let e = rtar::Error::from(e);
                    let _ = tx.send(Msg::Fail(e.to_string()));
                    return Err(Stopped::Tar(e));
                }
            }
        }
        if filled == 0 {
            return tx.send(Msg::End).map_err(|_| Stopped::Closed);
        }
        block.truncate(filled);
        tx.send(Msg::Data(block)).map_err(|_| Stopped::Closed)?;
    }
}

/// Reads the archive `input` to its end on a thread of its own, calling `f`
/// with each entry in order and, for a file, a reader of its content (`f` need
/// not read it all). `Err` is `f`'s error, which ends the read; `Ok(Err)` says
/// the archive is damaged at that point (what came before it was handed over).
pub fn read_tar<R: Read + Send, E>(
    input: R,
    limits: &Limits,
    f: &mut dyn FnMut(Entry, &mut (dyn Read + Send)) -> Result<(), E>,
) -> Result<Result<(), rtar::Error>, E> {
    let (tx, rx) = sync_channel::<Msg>(IN_FLIGHT);
    std::thread::scope(|s| {
        let reader = s.spawn(move || rtar::read(input, limits, &mut |e, content| pump(&tx, e, content)));
        let mut content = Content { rx, block: Vec::new(), at: 0, done: true };
        let mut failed = None;
        while let Ok(msg) = content.rx.recv() {
            let Msg::Entry(e) = msg else { continue };
            (content.block, content.at, content.done) = (Vec::new(), 0, e.kind != Kind::File);
            if let Err(err) = f(*e, &mut content) {
                failed = Some(err);
                break;
            }
            content.drain();
        }
        // The reading thread ends when it finds the other end gone.
        drop(content);
        let read = reader.join().unwrap_or_else(|p| std::panic::resume_unwind(p));
        match (failed, read) {
            (Some(err), _) => Err(err),
            (None, Ok(())) => Ok(Ok(())),
            (None, Err(Stopped::Tar(e))) => Ok(Err(e)),
            (None, Err(Stopped::Closed)) => Ok(Ok(())),
        }
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn archive(files: &[(&str, Vec<u8>)]) -> Vec<u8> {
        let mut b = tar::Builder::new(Vec::new());
        for (name, data) in files {
            let mut h = tar::Header::new_gnu();
            h.set_size(data.len() as u64);
            h.set_mode(0o644);
            h.set_cksum();
            b.append_data(&mut h, name, data.as_slice()).unwrap();
        }
        b.into_inner().unwrap()
    }

    #[test]
    fn entries_and_contents_come_in_order_whole() {
        let big: Vec<u8> = (0..(3 * BLOCK + 17)).map(|i| (i * 7) as u8).collect();
        let bytes = archive(&[("a", b"one".to_vec()), ("big", big.clone()), ("c", vec![])]);
        let mut seen = Vec::new();
        let r = read_tar(bytes.as_slice(), &Limits::default(), &mut |e, c| -> Result<(), ()> {
            let mut v = Vec::new();
            // The second file is read only in part: the rest is skipped.
            if e.path == b"a" {
                c.take(1).read_to_end(&mut v).unwrap();
            } else {
                c.read_to_end(&mut v).unwrap();
            }
            seen.push((e.path.clone(), v));
            Ok(())
        });
        assert!(matches!(r, Ok(Ok(()))));
        assert_eq!(seen, [(b"a".to_vec(), b"o".to_vec()), (b"big".to_vec(), big), (b"c".to_vec(), vec![])]);
    }

    #[test]
    fn a_cut_archive_fails_the_file_it_cuts_and_says_so() {
        let bytes = archive(&[("a", vec![1; 5000]), ("b", vec![2; 5000])]);
        let cut = &bytes[..512 + 5120 + 512 + 700];
        let mut results = Vec::new();
        let r = read_tar(cut, &Limits::default(), &mut |e, c| -> Result<(), ()> {
            let mut v = Vec::new();
            results.push((e.path.clone(), c.read_to_end(&mut v).is_ok()));
            Ok(())
        });
        assert_eq!(results, [(b"a".to_vec(), true), (b"b".to_vec(), false)]);
        assert!(matches!(r, Ok(Err(_))), "the damage is reported");
    }

    #[test]
    fn the_callbacks_error_ends_the_read() {
        let bytes = archive(&[("a", vec![1; 5000]), ("b", vec![2; 5000])]);
        let mut calls = 0;
        let r = read_tar(bytes.as_slice(), &Limits::default(), &mut |_, _| {
            calls += 1;
            Err("stop")
        });
        assert!(matches!(r, Err("stop")));
        assert_eq!(calls, 1);
    }
}
