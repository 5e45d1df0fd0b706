//! Previews of a file (docs/design.md#ui-previews): the start of a text shown
//! as text, an image shown as an image, anything else only named. What a file
//! is comes from its first bytes, never its name; an image is served under
//! its own type only for the formats browsers render without running anything
//! (PNG, JPEG, GIF, WebP, BMP), never SVG or HTML, so that a file of a snapshot
//! can never run as a page of the UI.

use std::io::Read;

use coffer_core::format::tree::Node;
use coffer_core::ops::dump::{ContentReader, repo_error};
use coffer_core::repo::Repository;

use crate::repos::ViewError;

/// The bytes of a text shown, at most.
pub const TEXT_LIMIT: usize = 256 << 10;
/// The bytes read to decide what a file is.
const SNIFF: usize = 4096;

/// What a preview shows.
pub enum Preview {
    /// Text: the first [`TEXT_LIMIT`] bytes, cut at a character's end, and
    /// whether there was more.
    Text { text: String, truncated: bool },
    /// An image of this media type.
    Image(&'static str),
    /// Something else, or a text in an encoding other than UTF-8.
    Binary,
}

/// The media type of an image the UI shows inline, from its first bytes.
pub fn image_type(head: &[u8]) -> Option<&'static str> {
    let starts = |magic: &[u8]| head.starts_with(magic);
    if starts(b"\x89PNG\r\n\x1a\n") {
        Some("image/png")
    } else if starts(b"\xff\xd8\xff") {
        Some("image/jpeg")
    } else if starts(b"GIF87a") || starts(b"GIF89a") {
        Some("image/gif")
    } else if head.len() >= 12 && &head[..4] == b"RIFF" && &head[8..12] == b"WEBP" {
        Some("image/webp")
    } else if starts(b"BM") && head.len() >= 14 {
        Some("image/bmp")
    } else {
        None
    }
}

/// What `bytes`, the start of a file whose whole is `size` bytes, shows as.
pub fn classify(bytes: &[u8], size: u64) -> Preview {
    if let Some(t) = image_type(bytes) {
        return Preview::Image(t);
    }
    let shown = &bytes[..bytes.len().min(TEXT_LIMIT)];
    let truncated = (shown.len() as u64) < size;
    let text = match std::str::from_utf8(shown) {
        Ok(t) => t,
        // Cut in the middle of a character by the limit: the whole characters before it.
        Err(e) if truncated && e.error_len().is_none() => {
            std::str::from_utf8(&shown[..e.valid_up_to()]).expect("valid up to there")
        }
        Err(_) => return Preview::Binary,
    };
    // NULs and other control characters but tab, newline, carriage return and form feed: not text.
    if text.chars().any(|c| c.is_control() && !matches!(c, '\t' | '\n' | '\r' | '\x0c')) {
        return Preview::Binary;
    }
    Preview::Text { text: text.to_string(), truncated }
}

/// The first `limit` bytes of the file `node`, verified as they are read.
pub fn head(repo: &Repository, node: &Node, shown: &std::path::Path, limit: usize) -> Result<Vec<u8>, ViewError> {
    let reader = ContentReader::new(repo, node, shown)?;
    let mut out = Vec::with_capacity(limit.min(node.size as usize));
    reader.take(limit as u64).read_to_end(&mut out).map_err(|e| match repo_error(&e) {
        Some(_) => match e.into_inner().map(|i| i.downcast::<coffer_core::Error>()) {
            Some(Ok(err)) => ViewError::Repo(*err),
            _ => ViewError::Unavailable(format!("cannot read {}", shown.display())),
        },
        None => ViewError::Unavailable(format!("cannot read {}: {e}", shown.display())),
    })?;
    Ok(out)
}

/// The preview of the file `node`: what its start shows as.
pub fn of(repo: &Repository, node: &Node, shown: &std::path::Path) -> Result<Preview, ViewError> {
    let bytes = head(repo, node, shown, TEXT_LIMIT.max(SNIFF))?;
    Ok(classify(&bytes, node.size))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn images_by_their_bytes_never_svg_or_html() {
        assert_eq!(image_type(b"\x89PNG\r\n\x1a\nrest"), Some("image/png"));
        assert_eq!(image_type(b"\xff\xd8\xff\xe0"), Some("image/jpeg"));
        assert_eq!(image_type(b"RIFF\0\0\0\0WEBPVP8 "), Some("image/webp"));
        assert_eq!(image_type(b"<svg xmlns=\"http://www.w3.org/2000/svg\"><script>x</script></svg>"), None);
        assert_eq!(image_type(b"<html><script>alert(1)</script>"), None);
        assert!(matches!(classify(b"<svg><script>alert(1)</script></svg>", 36), Preview::Text { .. }));
    }

    #[test]
    fn text_is_utf8_without_controls_cut_at_a_character() {
        match classify("héllo\nworld\t!".as_bytes(), 14) {
            Preview::Text { text, truncated } => assert_eq!((text.as_str(), truncated), ("héllo\nworld\t!", false)),
            _ => panic!("text expected"),
        }
        // The limit falls inside a two-byte character: the characters before it.
        let mut long = vec![b'a'; TEXT_LIMIT - 1];
        long.extend_from_slice("é and more".as_bytes());
        match classify(&long, long.len() as u64) {
            Preview::Text { text, truncated } => assert!(truncated && text.len() == TEXT_LIMIT - 1),
            _ => panic!("text expected"),
        }
        assert!(matches!(classify(b"caf\xe9", 4), Preview::Binary), "Latin-1 is not shown as text");
        assert!(matches!(classify(b"ELF\0\x01\x02", 6), Preview::Binary));
        assert!(matches!(classify(b"", 0), Preview::Text { .. }));
    }
}
