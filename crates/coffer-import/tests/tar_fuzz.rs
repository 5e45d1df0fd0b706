//! Fuzz-style test of the tar reader: real archives made by GNU tar (every format, sparse
//! files, long names, extended attributes) and by hand, mutated from a seeded generator
//! (bit flips, byte edits, truncations, size fields set huge, headers repeated), read to
//! their end. Nothing may panic, every content reader must yield exactly its entry's size
//! or an error, and a counting allocator bounds the peak of live heap bytes during the run.

mod support;

use std::io::Read;
use std::process::Command;

use coffer_import::tar::{self, Entry, Error, Limits};

#[global_allocator]
static ALLOC: support::Counting = support::Counting;

impl support::Rng {
    /// A few random edits of `input`, most of them inside headers.
    fn mutate(&mut self, input: &[u8]) -> Vec<u8> {
        let mut v = input.to_vec();
        let headers: Vec<usize> = (0..v.len() / 512).map(|i| i * 512).filter(|&o| is_header(&v[o..o + 512])).collect();
        for _ in 0..1 + self.below(4) {
            let base = if headers.is_empty() || self.below(4) == 0 {
                self.below(v.len() + 1)
            } else {
                headers[self.below(headers.len())] + self.below(512)
            };
            let at = base.min(v.len());
            match self.below(9) {
                0 if at < v.len() => v[at] ^= 1 << self.below(8),
                1 if at < v.len() => v[at] = [0, 0xff, 0x80, b'0', b'7', b'9', b' ', b'\n'][self.below(8)],
                2 => v.truncate(at),
                3 => {
                    // A size field (of a header, or of a sparse descriptor) set huge, in
                    // octal or base-256, with the checksum made right again.
                    if let Some(&h) = headers.get(self.below(headers.len())) {
                        let field = [124, 386, 398, 483][self.below(4)];
                        let huge: [u8; 12] = match self.below(3) {
                            0 => *b"77777777777\0",
                            1 => [0x80, 0, 0, 0, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff],
                            _ => *b"00100000000\0",
                        };
                        if h + 512 <= v.len() {
                            v[h + field..h + field + 12].copy_from_slice(&huge);
                            fix_checksum(&mut v[h..h + 512]);
                        }
                    }
                }
                4 => {
                    // A byte of a header changed, checksum fixed: the harder case.
                    if let Some(&h) = headers.get(self.below(headers.len()))
                        && h + 512 <= v.len()
                    {
                        let i = self.below(512);
                        v[h + i] = self.next() as u8;
                        fix_checksum(&mut v[h..h + 512]);
                    }
                }
                5 => {
                    // A block repeated or dropped.
                    let b = self.below(v.len() / 512 + 1) * 512;
                    if b + 512 <= v.len() {
                        if self.below(2) == 0 {
                            let blk = v[b..b + 512].to_vec();
                            v.splice(b..b, blk);
                        } else {
                            v.drain(b..b + 512);
                        }
                    }
                }
                6 if at < v.len() => {
                    // A PAX or sparse-map number made large.
                    let digits = [&b"99999999999999999999"[..], b"18446744073709551615", b"1048576", b"0"];
                    let d = digits[self.below(digits.len())];
                    let end = (at + d.len()).min(v.len());
                    v[at..end].copy_from_slice(&d[..end - at]);
                }
                _ => {}
            }
        }
        v
    }
}

fn is_header(b: &[u8]) -> bool {
    &b[257..262] == b"ustar"
}

fn fix_checksum(h: &mut [u8]) {
    h[148..156].fill(b' ');
    let sum: u32 = h.iter().map(|b| u32::from(*b)).sum();
    let s = format!("{sum:06o}\0 ");
    h[148..156].copy_from_slice(s.as_bytes());
}

fn gnu_tar(dir: &std::path::Path, args: &[&str]) -> Vec<u8> {
    let out = Command::new("/usr/bin/tar").arg("-C").arg(dir).arg("-cf").arg("-").args(args).output().unwrap();
    assert!(out.status.success(), "tar failed: {}", String::from_utf8_lossy(&out.stderr));
    out.stdout
}

fn samples() -> Vec<Vec<u8>> {
    let t = tempfile::tempdir().unwrap();
    let d = t.path();
    std::fs::create_dir(d.join("dir")).unwrap();
    std::fs::write(d.join("dir").join("x".repeat(150)), b"long name").unwrap();
    std::fs::write(d.join("small"), b"hello").unwrap();
    std::os::unix::fs::symlink("t".repeat(120), d.join("link")).unwrap();
    std::fs::hard_link(d.join("small"), d.join("hard")).unwrap();
    let f = std::fs::File::create(d.join("sparse")).unwrap();
    f.set_len(300_000).unwrap();
    {
        use std::os::unix::fs::FileExt;
        for i in 0..30 {
            f.write_all_at(b"data", i * 9000).unwrap();
        }
    }
    let _ = xattr::set(d.join("small"), "user.a", b"v\n1");
    let names = ["dir", "small", "link", "hard", "sparse"];
    let mut out = Vec::new();
    for fmt in [
        &["--format=pax", "--xattrs"][..],
        &["--format=gnu", "--sparse"],
        &["--format=pax", "--sparse", "--sparse-version=1.0"],
        &["--format=pax", "--sparse", "--sparse-version=0.1"],
        &["--format=pax", "--sparse", "--sparse-version=0.0"],
        &["--format=ustar", "small", "hard"],
    ] {
        let mut args = fmt.to_vec();
        if !fmt.contains(&"small") {
            args.extend(names);
        }
        out.push(gnu_tar(d, &args));
    }
    let mut b = ::tar::Builder::new(Vec::new());
    b.append_pax_extensions([("LIBARCHIVE.xattr.user.x", &b"AAE="[..]), ("mtime", b"-1.5")]).unwrap();
    let mut h = ::tar::Header::new_ustar();
    h.set_size(3);
    h.set_path("p").unwrap();
    h.set_cksum();
    b.append(&h, &b"abc"[..]).unwrap();
    out.push(b.into_inner().unwrap());
    out
}

fn read_through(archive: &[u8], limits: &Limits) -> Result<usize, Error> {
    let mut n = 0;
    tar::read(archive, limits, &mut |e: Entry, r: &mut dyn Read| -> Result<(), Error> {
        n += 1;
        let _ = e.unsupported().map(|u| u.to_string());
        let mut buf = [0u8; 8192];
        let mut got: u64 = 0;
        // A mutated sparse file may state a real size of exabytes of holes: read a prefix.
        if e.size > 64 << 20 {
            let _ = r.take(1 << 20).read_to_end(&mut Vec::new());
            return Ok(());
        }
        loop {
            match r.read(&mut buf) {
                Ok(0) => break,
                Ok(k) => got += k as u64,
                Err(err) => return Err(err.into()),
            }
        }
        assert_eq!(got, e.size, "{}: a content reader yielded fewer bytes than the size", e.path_lossy());
        Ok(())
    })?;
    Ok(n)
}

#[test]
fn tar_reader_survives_mutated_archives() {
    let samples = samples();
    let limits = Limits::default();
    for s in &samples {
        assert!(read_through(s, &limits).unwrap() >= 1);
    }
    let base = support::start_peak();
    let mut rng = support::Rng(0x7a2_c0ffee);
    let iterations = 30_000;
    let mut kinds = [0usize; 8];
    for i in 0..iterations {
        let sample = &samples[i % samples.len()];
        let m = rng.mutate(sample);
        let r = read_through(&m, &limits);
        let slot = match &r {
            Ok(_) => 0,
            Err(Error::Io { .. }) => 1,
            Err(Error::Header { .. }) => 2,
            Err(Error::TooLarge { .. }) => 3,
            Err(Error::Entry { .. }) => 4,
            Err(Error::SparseMap { .. }) => 5,
            Err(Error::Truncated { .. }) => 6,
            Err(Error::Unsupported { .. }) => 7,
        };
        kinds[slot] += 1;
        if let Err(e) = r {
            assert!(!e.to_string().is_empty());
        }
    }
    let peak = support::peak_above(base);
    eprintln!(
        "{iterations} rounds; outcomes (ok, io, header, too large, entry, sparse, truncated): {kinds:?}; peak heap above the start: {peak} bytes"
    );
    assert_eq!(kinds[1] + kinds[7], 0, "no I/O error or unsupported error from an in-memory read");
    assert!(kinds[0] > 0 && kinds[2] > 0 && kinds[6] > 0, "the mutations reach too few paths: {kinds:?}");
    assert!(peak < 48 << 20, "peak heap {peak} bytes: an allocation followed an unchecked length");
}
