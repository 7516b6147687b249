//! A JPEG marker walker: the frame header (size, components, precision, Adobe transform) and
//! Pillow's truncation rule, without decoding anything.
//!
//! Both backends go through it first, so limits and truncation are judged the same way whatever
//! decodes the pixels. It must stay a structural check: it never looks inside entropy-coded data
//! beyond finding its markers, and never allocates.

use crate::error::{Error, Result};

const FORMAT: &str = "jpeg";

/// What the frame header (SOFn) and the markers before the first scan say.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct Frame {
    /// Width in pixels.
    pub width: u32,
    /// Height in pixels.
    pub height: u32,
    /// Number of components (1 gray, 3 YCbCr/RGB, 4 CMYK/YCCK).
    pub components: u8,
    /// Bits per sample.
    pub precision: u8,
    /// The SOF marker's code (0xC0 baseline, 0xC2 progressive, ...).
    pub sof: u8,
    /// The Adobe APP14 color transform, if there is such a segment.
    pub adobe_transform: Option<u8>,
    /// Offset of the first scan's entropy-coded data (just past its SOS header).
    pub scan_start: usize,
}

impl Frame {
    /// Rejects what Pillow rejects at open time: other than 8-bit samples ("cannot handle 12-bit
    /// layers") and component counts other than 1, 3 or 4.
    pub fn check_supported(&self) -> Result<()> {
        if self.precision != 8 {
            return Err(unsupported(format!(
                "{}-bit samples (only 8-bit JPEG is decoded)",
                self.precision
            )));
        }
        if !matches!(self.components, 1 | 3 | 4) {
            return Err(unsupported(format!(
                "{} components (only 1, 3 or 4)",
                self.components
            )));
        }
        Ok(())
    }
}

fn truncated(detail: &str) -> Error {
    Error::Truncated {
        format: FORMAT,
        detail: detail.to_string(),
    }
}

fn corrupt(detail: impl Into<String>) -> Error {
    Error::Corrupt {
        format: FORMAT,
        detail: detail.into(),
    }
}

fn unsupported(detail: String) -> Error {
    Error::Unsupported {
        format: FORMAT,
        detail,
    }
}

fn be16(bytes: &[u8], at: usize) -> Option<u16> {
    Some(u16::from_be_bytes([*bytes.get(at)?, *bytes.get(at + 1)?]))
}

/// Whether a marker code starts a frame (SOF0-3, 5-7, 9-11, 13-15; C4, C8 and CC are DHT, JPG
/// and DAC).
fn is_sof(marker: u8) -> bool {
    matches!(marker, 0xC0..=0xCF) && !matches!(marker, 0xC4 | 0xC8 | 0xCC)
}

/// Markers that have no length field.
fn is_standalone(marker: u8) -> bool {
    matches!(marker, 0x01 | 0xD0..=0xD9)
}

/// The next marker code at or after `*pos`, skipping junk and fill bytes as libjpeg does (it
/// warns and goes on, and Pillow's own header parser does the same). Leaves `*pos` after the
/// code.
fn next_marker(bytes: &[u8], pos: &mut usize) -> Option<u8> {
    loop {
        while *pos < bytes.len() && bytes[*pos] != 0xFF {
            *pos += 1;
        }
        while *pos < bytes.len() && bytes[*pos] == 0xFF {
            *pos += 1;
        }
        let marker = *bytes.get(*pos)?;
        *pos += 1;
        // FF 00 outside a scan is junk, not a marker.
        if marker != 0x00 {
            return Some(marker);
        }
    }
}

/// Walks the markers from SOI to the first SOS and returns the frame header.
pub(crate) fn read_frame(bytes: &[u8]) -> Result<Frame> {
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return Err(corrupt("no SOI marker"));
    }
    let mut pos = 2;
    let mut frame: Option<Frame> = None;
    let mut adobe_transform = None;
    loop {
        let Some(marker) = next_marker(bytes, &mut pos) else {
            return Err(truncated("data ends before the first scan"));
        };
        match marker {
            0xD8 => return Err(corrupt("second SOI marker before the first scan")),
            0xD9 => return Err(corrupt("EOI before any scan: the file holds no image")),
            m if is_standalone(m) => continue,
            _ => {}
        }
        let Some(length) = be16(bytes, pos) else {
            return Err(truncated("data ends inside a marker segment"));
        };
        let length = usize::from(length);
        if length < 2 {
            return Err(corrupt(format!(
                "marker 0xFF{marker:02X} has length {length}"
            )));
        }
        let end = pos + length;
        if end > bytes.len() {
            return Err(truncated("data ends inside a marker segment"));
        }
        let body = &bytes[pos + 2..end];
        if is_sof(marker) {
            if frame.is_some() {
                return Err(corrupt("two frame headers (SOF)"));
            }
            frame = Some(parse_sof(marker, body)?);
        } else if marker == 0xEE && body.len() >= 12 && body.starts_with(b"Adobe") {
            adobe_transform = Some(body[11]);
        } else if marker == 0xDA {
            let Some(mut f) = frame else {
                return Err(corrupt("scan (SOS) before the frame header (SOF)"));
            };
            f.adobe_transform = adobe_transform;
            f.scan_start = end;
            return Ok(f);
        }
        pos = end;
    }
}

/// Calls `f(marker, body)` for each segment from SOI to the first SOS (its header included),
/// walking as [`read_frame`] does; stops quietly where the structure breaks (the decode says
/// what is wrong). For metadata readers, which must not fail where the decode would not.
pub(crate) fn for_each_segment<'a>(bytes: &'a [u8], mut f: impl FnMut(u8, &'a [u8])) {
    if !bytes.starts_with(&[0xFF, 0xD8]) {
        return;
    }
    let mut pos = 2;
    while let Some(marker) = next_marker(bytes, &mut pos) {
        match marker {
            0xD8 | 0xD9 => return,
            m if is_standalone(m) => continue,
            _ => {}
        }
        let Some(length) = be16(bytes, pos) else {
            return;
        };
        let end = pos + usize::from(length);
        let Some(body) = bytes.get(pos + 2..end) else {
            return;
        };
        f(marker, body);
        if marker == 0xDA {
            return;
        }
        pos = end;
    }
}

fn parse_sof(marker: u8, body: &[u8]) -> Result<Frame> {
    if body.len() < 6 {
        return Err(corrupt("frame header (SOF) too short"));
    }
    let precision = body[0];
    let height = u32::from(u16::from_be_bytes([body[1], body[2]]));
    let width = u32::from(u16::from_be_bytes([body[3], body[4]]));
    let components = body[5];
    if body.len() < 6 + 3 * usize::from(components) {
        return Err(corrupt(
            "frame header (SOF) shorter than its component list",
        ));
    }
    if width == 0 || height == 0 {
        return Err(corrupt(format!("frame header claims {width}x{height}")));
    }
    if components == 0 {
        return Err(corrupt("frame header has no components"));
    }
    Ok(Frame {
        width,
        height,
        components,
        precision,
        sof: marker,
        adobe_transform: None,
        scan_start: 0,
    })
}

/// Pillow's truncation rule: Pillow feeds libjpeg from a suspending source and reports "image
/// file is truncated" when libjpeg asks for bytes past the end before the image is complete.
/// libjpeg stops asking once it meets the EOI marker, so: the data is complete if an EOI marker
/// follows the scans. Trailing bytes after EOI are fine (Pillow ignores them too).
///
/// Fast path: nearly every file ends with EOI, checked in O(1). A file that ends with `FF D9` but
/// was cut inside a header segment is caught by [`read_frame`] or the decoder's own header read;
/// inside entropy-coded data `FF D9` can only be a real EOI.
pub(crate) fn check_complete(bytes: &[u8], scan_start: usize) -> Result<()> {
    if bytes.ends_with(&[0xFF, 0xD9]) {
        return Ok(());
    }
    let mut pos = scan_start;
    loop {
        // Entropy-coded data: only FF starts something; FF 00 is a stuffed byte.
        let Some(offset) = bytes
            .get(pos..)
            .and_then(|rest| rest.iter().position(|&b| b == 0xFF))
        else {
            return Err(truncated("data ends before the EOI marker"));
        };
        pos += offset;
        while pos < bytes.len() && bytes[pos] == 0xFF {
            pos += 1;
        }
        let Some(&marker) = bytes.get(pos) else {
            return Err(truncated("data ends before the EOI marker"));
        };
        pos += 1;
        match marker {
            0xD9 => return Ok(()),
            0x00 | 0x01 | 0xD0..=0xD8 => {}
            _ => {
                // A segment between scans (DHT, SOS, DRI, DNL, APPn, COM...): skip it whole.
                let Some(length) = be16(bytes, pos) else {
                    return Err(truncated("data ends inside a marker segment"));
                };
                if length < 2 {
                    return Err(corrupt(format!(
                        "marker 0xFF{marker:02X} has length {length}"
                    )));
                }
                pos += usize::from(length);
                if pos > bytes.len() {
                    return Err(truncated("data ends inside a marker segment"));
                }
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// SOI, APP14 Adobe (transform 2), SOF0 5x3 with 4 components, SOS, entropy data, EOI.
    fn tiny() -> Vec<u8> {
        let mut v = vec![0xFF, 0xD8];
        v.extend_from_slice(&[0xFF, 0xEE, 0, 14]);
        v.extend_from_slice(b"Adobe\0\x64\0\0\0\0\x02");
        v.extend_from_slice(&[0xFF, 0xC0, 0, 20, 8, 0, 3, 0, 5, 4]);
        v.extend_from_slice(&[1, 0x11, 0, 2, 0x11, 0, 3, 0x11, 0, 4, 0x11, 0]);
        v.extend_from_slice(&[0xFF, 0xDA, 0, 8, 1, 1, 0, 0, 63, 0]);
        v.extend_from_slice(&[0x12, 0xFF, 0x00, 0x34, 0xFF, 0xD0, 0x56]);
        v.extend_from_slice(&[0xFF, 0xD9]);
        v
    }

    #[test]
    fn reads_the_frame() {
        let data = tiny();
        let f = read_frame(&data).expect("valid");
        assert_eq!((f.width, f.height, f.components, f.precision), (5, 3, 4, 8));
        assert_eq!(f.sof, 0xC0);
        assert_eq!(f.adobe_transform, Some(2));
        assert_eq!(f.scan_start, data.len() - 9);
        assert!(f.check_supported().is_ok());
        check_complete(&data, f.scan_start).expect("complete");
    }

    #[test]
    fn truncation_anywhere_is_truncated() {
        let data = tiny();
        let scan_start = read_frame(&data).expect("valid").scan_start;
        for cut in 2..data.len() - 1 {
            let part = &data[..cut];
            let result = read_frame(part).and_then(|f| check_complete(part, f.scan_start));
            assert!(
                matches!(result, Err(Error::Truncated { .. })),
                "cut at {cut} (scan at {scan_start}): {result:?}"
            );
        }
    }

    #[test]
    fn trailing_bytes_and_segments_between_scans() {
        let mut data = tiny();
        data.extend_from_slice(b"trailing junk \xFF");
        let f = read_frame(&data).expect("valid");
        check_complete(&data, f.scan_start).expect("EOI found before the junk");

        // A second scan whose header contains FF D9-looking bytes inside its length.
        let mut data = tiny();
        data.truncate(data.len() - 2);
        data.extend_from_slice(&[0xFF, 0xC4, 0, 5, 0xFF, 0xD9, 0x00, 0x42]);
        assert!(matches!(
            check_complete(&data, f.scan_start),
            Err(Error::Truncated { .. })
        ));
        data.extend_from_slice(&[0xFF, 0xD9]);
        check_complete(&data, f.scan_start).expect("complete");
    }

    #[test]
    fn structural_errors() {
        let data = tiny();
        // 12-bit samples and 2 components are Pillow's "cannot handle".
        let mut twelve = data.clone();
        twelve[22] = 12;
        let f = read_frame(&twelve).expect("parses");
        assert!(matches!(
            f.check_supported(),
            Err(Error::Unsupported { .. })
        ));
        let mut zero = data.clone();
        zero[25] = 0;
        zero[26] = 0;
        assert!(matches!(read_frame(&zero), Err(Error::Corrupt { .. })));
        // SOS before SOF.
        let mut v = vec![0xFF, 0xD8, 0xFF, 0xDA, 0, 2, 0xFF, 0xD9];
        assert!(matches!(read_frame(&v), Err(Error::Corrupt { .. })));
        // Tables-only datastream.
        v = vec![0xFF, 0xD8, 0xFF, 0xFE, 0, 3, b'x', 0xFF, 0xD9];
        assert!(matches!(read_frame(&v), Err(Error::Corrupt { .. })));
        // Bad length.
        v = vec![0xFF, 0xD8, 0xFF, 0xFE, 0, 1, 0xFF, 0xD9];
        assert!(matches!(read_frame(&v), Err(Error::Corrupt { .. })));
        // Junk between markers is skipped, as libjpeg does.
        let mut junk = data[..2].to_vec();
        junk.extend_from_slice(b"junk");
        junk.extend_from_slice(&data[2..]);
        assert_eq!(read_frame(&junk).expect("valid").width, 5);
    }
}
