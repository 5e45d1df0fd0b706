//! Downloads (docs/design.md#ui-downloads): a file's content, or a directory
//! as a tar or zip archive, written on a blocking thread into a channel that
//! the response body reads, a chunk of at most [`CHUNK`] bytes at a time, so
//! memory stays flat whatever is downloaded and a slow client slows the reading.
//!
//! The first chunk is made before the status is sent: what cannot be read at
//! all gets an error status. Damage found later cuts the connection: a file's
//! length is sent first, and an archive is sent chunked, so the client sees
//! that the download is incomplete, never a short file taken for whole.

use std::io::{self, Write};
use std::pin::Pin;
use std::task::{Context, Poll};

use bytes::Bytes;
use coffer_core::ops::dump::ContentReader;
use http::{HeaderValue, Response, StatusCode, header};
use http_body_util::BodyExt;

use crate::app::{Fail, fail};
use crate::http::{self as h, Body};
use crate::preview;
use crate::repos::{Directory, RepoView};

/// The bytes read ahead of the client, per chunk.
pub const CHUNK: usize = 1 << 20;
/// Chunks waiting for the client, at most.
const QUEUED: usize = 4;

/// How a file is sent.
#[derive(Clone, Copy, PartialEq, Eq)]
pub enum Disposition {
    /// To be saved: `application/octet-stream`, an attachment.
    Attachment,
    /// To be shown in a page: only an image of a type [`preview::image_type`]
    /// knows, under that type, inline; anything else is refused (415).
    Image,
}

/// A file's content, with its length.
pub async fn file(
    view: std::sync::Arc<RepoView>,
    id: String,
    path: Vec<u8>,
    how: Disposition,
) -> Result<Response<Body>, Fail> {
    let (repo, node, shown) = blocking(move || Ok(view.file(&id, &path)?)).await?;
    let (size, name) = (node.size, shown.file_name().map(|n| n.to_string_lossy().into_owned()).unwrap_or_default());
    let media = match how {
        Disposition::Attachment => "application/octet-stream",
        Disposition::Image => {
            let (r, n, p) = (repo.clone(), node.clone(), shown.clone());
            let head = blocking(move || Ok(preview::head(&r, &n, &p, 16)?)).await?;
            preview::image_type(&head).ok_or_else(|| {
                fail(StatusCode::UNSUPPORTED_MEDIA_TYPE, format!("{} is not an image the UI shows", shown.display()))
            })?
        }
    };
    let body = stream(move |out| {
        let mut reader = ContentReader::new(&repo, &node, &shown).map_err(|e| e.to_string())?;
        out.fill_from(&mut reader).map_err(|e| e.to_string())
    })
    .await?;
    let mut resp = h::respond(StatusCode::OK, media, body);
    resp.headers_mut().insert(header::CONTENT_LENGTH, HeaderValue::from(size));
    let d = if how == Disposition::Image { HeaderValue::from_static("inline") } else { disposition(&name) };
    resp.headers_mut().insert(header::CONTENT_DISPOSITION, d);
    Ok(resp)
}

/// A directory as an archive, `NAME.tar` or `NAME.zip`; zip's times are in UTC,
/// as the pages show them.
pub async fn archive(
    view: std::sync::Arc<RepoView>,
    id: String,
    path: Vec<u8>,
    format: coffer_archive::Format,
) -> Result<Response<Body>, Fail> {
    let Directory { repo, tree, entry, prefix, name } = blocking(move || Ok(view.dir(&id, &path)?)).await?;
    let body = stream(move |out| {
        // A path too long for an archive comes only from a crafted tree: the
        // archive would lack it, so the download fails rather than leave it out.
        let mut too_long =
            |t: coffer_core::repo::tree_walk::TooLong| Err(coffer_core::Error::InvalidInput(t.to_string()));
        let tz = jiff::tz::TimeZone::UTC;
        coffer_archive::write(&repo, tree, &prefix, entry.as_ref(), format, &tz, out, &mut too_long)
            .map(|_| ())
            .map_err(|e| e.to_string())
    })
    .await?;
    let (kind, ext) = match format {
        coffer_archive::Format::Tar => ("application/x-tar", "tar"),
        coffer_archive::Format::Zip => ("application/zip", "zip"),
    };
    let mut resp = h::respond(StatusCode::OK, kind, body);
    resp.headers_mut().insert(header::CONTENT_DISPOSITION, disposition(&format!("{name}.{ext}")));
    Ok(resp)
}

/// Runs `write` on a blocking thread into a body; answers once the first
/// chunk is ready (or `write` ended), with `write`'s error if it failed before.
async fn stream(write: impl FnOnce(&mut ChunkWriter) -> Result<(), String> + Send + 'static) -> Result<Body, Fail> {
    let (tx, rx) = tokio::sync::mpsc::channel(QUEUED);
    let (first_tx, first_rx) = tokio::sync::oneshot::channel();
    tokio::task::spawn_blocking(move || {
        let mut w = ChunkWriter::new(tx, first_tx);
        match write(&mut w).and_then(|()| w.push().map_err(|e| e.to_string())) {
            Ok(()) => w.ready(Ok(())),
            // The client went away: nobody to tell.
            Err(_) if w.gone => {}
            Err(e) => match w.first.take() {
                Some(f) => {
                    let _ = f.send(Err(e));
                }
                None => {
                    let _ = w.tx.blocking_send(Err(io::Error::other(e)));
                }
            },
        }
    });
    match first_rx.await {
        Ok(Ok(())) => Ok(ChannelBody(rx).boxed()),
        Ok(Err(e)) => Err(fail(StatusCode::BAD_GATEWAY, e)),
        Err(_) => Err(fail(StatusCode::INTERNAL_SERVER_ERROR, "the download stopped")),
    }
}

/// A `Write` that hands full chunks to the response body.
struct ChunkWriter {
    tx: tokio::sync::mpsc::Sender<Result<Bytes, io::Error>>,
    /// Told when the first chunk is ready.
    first: Option<tokio::sync::oneshot::Sender<Result<(), String>>>,
    /// The chunk being filled, [`CHUNK`] bytes long, of which `len` are written.
    buf: Vec<u8>,
    len: usize,
    /// The client went away.
    gone: bool,
}

impl ChunkWriter {
    fn new(
        tx: tokio::sync::mpsc::Sender<Result<Bytes, io::Error>>,
        first: tokio::sync::oneshot::Sender<Result<(), String>>,
    ) -> ChunkWriter {
        ChunkWriter { tx, first: Some(first), buf: vec![0; CHUNK], len: 0, gone: false }
    }

    fn ready(&mut self, r: Result<(), String>) {
        if let Some(f) = self.first.take() {
            let _ = f.send(r);
        }
    }

    /// Reads `r` to its end straight into the chunks (no copy in between).
    fn fill_from(&mut self, r: &mut impl io::Read) -> io::Result<()> {
        loop {
            match r.read(&mut self.buf[self.len..]) {
                Ok(0) => return Ok(()),
                Ok(n) => self.len += n,
                Err(e) if e.kind() == io::ErrorKind::Interrupted => {}
                Err(e) => return Err(e),
            }
            if self.len == CHUNK {
                self.push()?;
            }
        }
    }

    /// Sends what is written.
    fn push(&mut self) -> io::Result<()> {
        if self.len == 0 {
            return Ok(());
        }
        self.ready(Ok(()));
        let mut chunk = std::mem::replace(&mut self.buf, vec![0; CHUNK]);
        chunk.truncate(std::mem::take(&mut self.len));
        if self.tx.blocking_send(Ok(Bytes::from(chunk))).is_err() {
            self.gone = true;
            return Err(io::Error::new(io::ErrorKind::BrokenPipe, "the client went away"));
        }
        Ok(())
    }
}

impl Write for ChunkWriter {
    fn write(&mut self, data: &[u8]) -> io::Result<usize> {
        let n = data.len().min(CHUNK - self.len);
        self.buf[self.len..self.len + n].copy_from_slice(&data[..n]);
        self.len += n;
        if self.len == CHUNK {
            self.push()?;
        }
        Ok(n)
    }

    fn flush(&mut self) -> io::Result<()> {
        // Chunks go out when full: flushing every small write would send
        // tiny chunks.
        Ok(())
    }
}

/// Runs `f` on a blocking thread; a panic there is an internal error.
pub async fn blocking<T: Send + 'static>(f: impl FnOnce() -> Result<T, Fail> + Send + 'static) -> Result<T, Fail> {
    match tokio::task::spawn_blocking(f).await {
        Ok(r) => r,
        Err(_) => Err(fail(StatusCode::INTERNAL_SERVER_ERROR, "the request's work failed unexpectedly")),
    }
}

/// `attachment`, with the name as ASCII (others replaced) and exactly (RFC 5987).
fn disposition(name: &str) -> HeaderValue {
    let ascii: String =
        name.chars().map(|c| if c.is_ascii_graphic() && c != '"' && c != '\\' || c == ' ' { c } else { '_' }).collect();
    let exact = percent_encoding::utf8_percent_encode(name, percent_encoding::NON_ALPHANUMERIC);
    HeaderValue::from_str(&format!("attachment; filename=\"{ascii}\"; filename*=UTF-8''{exact}"))
        .unwrap_or_else(|_| HeaderValue::from_static("attachment"))
}

/// A body fed by a channel.
pub struct ChannelBody(pub tokio::sync::mpsc::Receiver<Result<Bytes, io::Error>>);

impl http_body::Body for ChannelBody {
    type Data = Bytes;
    type Error = io::Error;

    fn poll_frame(
        mut self: Pin<&mut Self>,
        cx: &mut Context<'_>,
    ) -> Poll<Option<Result<http_body::Frame<Bytes>, io::Error>>> {
        self.0.poll_recv(cx).map(|o| o.map(|r| r.map(http_body::Frame::data)))
    }
}
