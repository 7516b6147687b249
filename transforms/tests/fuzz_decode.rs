//! Property-based fuzzing of the decoder front end: arbitrary bytes, JPEG streams built from a
//! grammar of markers (hostile sizes, component counts, lying lengths, truncation), PNM headers
//! built from parts (hostile sides and maxvals, comments, short rasters), and corpus images with
//! proptest-chosen edits, through every entry point of both JPEG backends.
//!
//! The promises checked are those of `tests/support/fuzz_props.rs` (shared with the cargo-fuzz
//! targets in `fuzz/`). What this adds to `decode_mutations.rs` (a fixed seeded sweep of single
//! edits): several edits at once, inputs built from the grammar rather than from a file, and
//! shrinking to a minimal failing input. The default case counts keep this file to a few
//! seconds in `make test`; `PROPTEST_CASES=20000 cargo test --test fuzz_decode` runs longer.

use std::sync::OnceLock;

use ferroloader_transforms::decode::{DecodeContext, DecodeOptions, Decoder, Format};
use ferroloader_transforms::{Error, RgbImage};
use proptest::prelude::*;
use proptest::test_runner::TestCaseError;

#[path = "../../tests/support/fixtures.rs"]
mod fixtures;
#[path = "../../tests/support/fuzz_props.rs"]
mod fuzz_props;

use fuzz_props::{
    check_decode, check_exif, check_still_exact, contexts, ErrorKind, Probe, MAX_PIXELS,
};

#[global_allocator]
static ALLOC: fuzz_props::Tracking = fuzz_props::Tracking;

/// Cases per property unless `PROPTEST_CASES` says otherwise.
fn config(default_cases: u32) -> ProptestConfig {
    let cases = std::env::var("PROPTEST_CASES")
        .ok()
        .and_then(|v| v.parse().ok())
        .unwrap_or(default_cases);
    ProptestConfig {
        cases,
        // Failures are turned into named regression tests by hand (see the end of this file).
        failure_persistence: None,
        ..ProptestConfig::default()
    }
}

/// Small corpus images: every JPEG kind but the huge one, and one of each other format.
const CORPUS: &[&str] = &[
    "jpeg_tiny_17x9_420.jpg",
    "jpeg_tiny_9x17_444.jpg",
    "jpeg_tiny_7x5_422.jpg",
    "jpeg_gray_7x5.jpg",
    "jpeg_420_77x333.jpg",
    "jpeg_444_333x77.jpg",
    "jpeg_progressive_420.jpg",
    "jpeg_gray_progressive.jpg",
    "jpeg_cmyk_progressive.jpg",
    "jpeg_cmyk.jpg",
    "jpeg_ycck_patched.jpg",
    "jpeg_adobe_rgb_patched.jpg",
    "jpeg_restart_blocks_420.jpg",
    "jpeg_restart_progressive_420.jpg",
    "jpeg_optimized_420.jpg",
    "png_p_trns.png",
    "png_gray16.png",
    "gif_p.gif",
    "bmp_1bit.bmp",
    "tiff_l_deflate.tif",
    "webp_lossless.webp",
    "webp_lossy.webp",
    "pnm_p6_3x2.ppm",
    "pnm_p5_3x2.pgm",
    "pnm_p4_9x2.pbm",
    "pnm_p3_3x2.ppm",
    "pnm_p1.pbm",
];

struct Corpus {
    files: Vec<(&'static str, Vec<u8>)>,
    /// The good image every context must still decode exactly after a bad input.
    good: Vec<u8>,
    /// What it decodes to, per backend (turbo, zune).
    expected: [RgbImage; 2],
}

fn corpus() -> &'static Corpus {
    static CORPUS_CELL: OnceLock<Corpus> = OnceLock::new();
    CORPUS_CELL.get_or_init(|| {
        fuzz_props::install_panic_hook(false);
        let files: Vec<_> = CORPUS
            .iter()
            .map(|&name| (name, fixtures::read_fixture("decode", name)))
            .collect();
        let good = files[0].1.clone();
        let expected = contexts().map(|mut ctx| {
            let mut img = RgbImage::new();
            ctx.decode(&good, &mut img).expect("the good image decodes");
            img
        });
        Corpus {
            files,
            good,
            expected,
        }
    })
}

/// Every property on `bytes` with both backends, then the context-reuse check.
fn check_all(bytes: &[u8], probe: Probe) -> Result<[fuzz_props::Outcome; 2], TestCaseError> {
    let corpus = corpus();
    let mut out = RgbImage::new();
    let mut outcomes = Vec::new();
    for (i, mut ctx) in contexts().into_iter().enumerate() {
        let backend = ctx.options().decoder;
        let outcome = check_decode(&mut ctx, bytes, probe, &mut out)
            .map_err(|m| TestCaseError::fail(format!("{backend:?}: {m}")))?;
        check_still_exact(&mut ctx, &corpus.good, &corpus.expected[i], &mut out)
            .map_err(TestCaseError::fail)?;
        outcomes.push(outcome);
    }
    check_exif(bytes, probe).map_err(|m| TestCaseError::fail(format!("exif: {m}")))?;
    let [turbo, zune]: [fuzz_props::Outcome; 2] = outcomes.try_into().expect("two backends");
    // The backends share the marker walk, so they agree on what the header says.
    prop_assert_eq!(turbo.info.is_ok(), zune.info.is_ok());
    Ok([turbo, zune])
}

fn probe() -> impl Strategy<Value = Probe> {
    let min = prop_oneof![Just(0u32), Just(u32::MAX), any::<u32>()];
    (
        any::<[u32; 4]>(),
        prop::bool::weighted(0.1),
        [min.clone(), min],
    )
        .prop_map(|(rect, outside, min)| Probe { rect, outside, min })
}

// ---------------------------------------------------------------------------------------------
// The JPEG marker grammar.

/// One piece of a generated JPEG stream.
#[derive(Clone, Debug)]
enum Seg {
    /// A marker with no length: SOI D8, EOI D9, RSTn D0-D7, TEM 01, or a stray one.
    Bare(u8),
    /// APPn (E0-EF) or COM (FE) with a body; `APP14 "Adobe"` carries a transform byte.
    App(u8, Vec<u8>),
    Adobe(u8),
    /// DQT: table id (and precision in the high nibble), 64 or 128 value bytes.
    Dqt(u8, Vec<u8>),
    /// SOFn: marker code, precision, height, width, components (id, sampling, table).
    Sof {
        code: u8,
        precision: u8,
        height: u16,
        width: u16,
        components: Vec<(u8, u8, u8)>,
    },
    /// DHT: class/id byte, 16 counts, symbols (counts may not match the symbols).
    Dht(u8, [u8; 16], Vec<u8>),
    /// SOS: components (id, tables), spectral start/end, approximation bits.
    Sos(Vec<(u8, u8)>, u8, u8, u8),
    /// DRI with its interval.
    Dri(u16),
    /// Entropy-coded bytes (with FF stuffed or not, as generated).
    Data(Vec<u8>),
    /// A segment from a real file, verbatim.
    Real(Vec<u8>),
    /// A marker whose length field lies by `delta` about the body that follows.
    Lying(u8, i32, Vec<u8>),
}

impl Seg {
    fn segment(marker: u8, body: &[u8], out: &mut Vec<u8>) {
        out.extend_from_slice(&[0xFF, marker]);
        out.extend_from_slice(&(body.len() as u16 + 2).to_be_bytes());
        out.extend_from_slice(body);
    }

    fn encode(&self, out: &mut Vec<u8>) {
        match self {
            Seg::Bare(m) => out.extend_from_slice(&[0xFF, *m]),
            Seg::App(m, body) => Seg::segment(*m, body, out),
            Seg::Adobe(transform) => {
                let mut body = b"Adobe\0\x64\0\0\0\0".to_vec();
                body.push(*transform);
                Seg::segment(0xEE, &body, out);
            }
            Seg::Dqt(id, values) => {
                let mut body = vec![*id];
                body.extend_from_slice(values);
                Seg::segment(0xDB, &body, out);
            }
            Seg::Sof {
                code,
                precision,
                height,
                width,
                components,
            } => {
                let mut body = vec![*precision];
                body.extend_from_slice(&height.to_be_bytes());
                body.extend_from_slice(&width.to_be_bytes());
                body.push(components.len() as u8);
                for (id, sampling, table) in components {
                    body.extend_from_slice(&[*id, *sampling, *table]);
                }
                Seg::segment(*code, &body, out);
            }
            Seg::Dht(class_id, counts, symbols) => {
                let mut body = vec![*class_id];
                body.extend_from_slice(counts);
                body.extend_from_slice(symbols);
                Seg::segment(0xC4, &body, out);
            }
            Seg::Sos(components, ss, se, a) => {
                let mut body = vec![components.len() as u8];
                for (id, tables) in components {
                    body.extend_from_slice(&[*id, *tables]);
                }
                body.extend_from_slice(&[*ss, *se, *a]);
                Seg::segment(0xDA, &body, out);
            }
            Seg::Dri(interval) => Seg::segment(0xDD, &interval.to_be_bytes(), out),
            Seg::Data(bytes) | Seg::Real(bytes) => out.extend_from_slice(bytes),
            Seg::Lying(m, delta, body) => {
                let length = (body.len() as i32 + 2 + delta).clamp(0, 0xFFFF) as u16;
                out.extend_from_slice(&[0xFF, *m]);
                out.extend_from_slice(&length.to_be_bytes());
                out.extend_from_slice(body);
            }
        }
    }
}

/// The marker segments of a real JPEG, each with its marker; an SOS keeps its entropy-coded
/// data (through any RSTn) up to the next marker.
fn split_segments(jpeg: &[u8]) -> Vec<Vec<u8>> {
    let mut segments = Vec::new();
    let mut pos = 2;
    while pos + 4 <= jpeg.len() && jpeg[pos] == 0xFF {
        let marker = jpeg[pos + 1];
        if marker == 0xD9 {
            break;
        }
        let length = usize::from(u16::from_be_bytes([jpeg[pos + 2], jpeg[pos + 3]]));
        let mut end = (pos + 2 + length).min(jpeg.len());
        if marker == 0xDA {
            // A marker ends the scan unless it is a stuffed byte or a restart.
            let ends_scan =
                |at: usize| jpeg[at] == 0xFF && !matches!(jpeg[at + 1], 0x00 | 0xD0..=0xD7);
            while end + 1 < jpeg.len() && !ends_scan(end) {
                end += 1;
            }
        }
        segments.push(jpeg[pos..end].to_vec());
        pos = end;
    }
    segments
}

/// Segments of the small JPEGs, for the grammar's `Real` pieces: real tables and scans let the
/// decoders get past the headers.
fn real_segments() -> &'static [Vec<u8>] {
    static SEGMENTS: OnceLock<Vec<Vec<u8>>> = OnceLock::new();
    SEGMENTS.get_or_init(|| {
        corpus()
            .files
            .iter()
            .filter(|(name, bytes)| name.ends_with(".jpg") && bytes.len() < 16 << 10)
            .flat_map(|(_, bytes)| split_segments(bytes))
            .collect()
    })
}

/// Image sides: the edges (0, 1, 65535) and the pixel limit's neighbourhood come up often.
fn side() -> impl Strategy<Value = u16> {
    prop_oneof![
        3 => 1u16..64,
        2 => Just(0u16),
        2 => Just(u16::MAX),
        1 => Just(1024u16),
        1 => Just(1025u16),
        2 => any::<u16>(),
    ]
}

fn sof() -> impl Strategy<Value = Seg> {
    let code = prop_oneof![
        4 => prop::sample::select(vec![0xC0u8, 0xC1, 0xC2]),
        1 => prop::sample::select(vec![0xC3u8, 0xC5, 0xC9, 0xCA, 0xCB, 0xCD, 0xCF]),
    ];
    let precision = prop_oneof![8 => Just(8u8), 1 => Just(12u8), 1 => any::<u8>()];
    let component = (
        prop_oneof![3 => 1u8..4, 1 => any::<u8>()],
        prop_oneof![3 => prop::sample::select(vec![0x11u8, 0x21, 0x22, 0x12, 0x41, 0x14]), 1 => any::<u8>()],
        prop_oneof![3 => 0u8..2, 1 => any::<u8>()],
    );
    let component2 = component.clone();
    let components = prop_oneof![
        4 => prop::sample::select(vec![1usize, 3, 4])
            .prop_flat_map(move |n| prop::collection::vec(component.clone(), n)),
        1 => prop::collection::vec(component2, 0..8),
    ];
    (code, precision, side(), side(), components).prop_map(
        |(code, precision, height, width, components)| Seg::Sof {
            code,
            precision,
            height,
            width,
            components,
        },
    )
}

fn bytes(max: usize) -> impl Strategy<Value = Vec<u8>> {
    prop::collection::vec(any::<u8>(), 0..max)
}

fn seg() -> impl Strategy<Value = Seg> {
    let real = prop::sample::select(real_segments().to_vec()).prop_map(Seg::Real);
    prop_oneof![
        2 => prop_oneof![Just(0xD8u8), Just(0xD9), 0xD0u8..=0xD7, Just(0x01), any::<u8>()]
            .prop_map(Seg::Bare),
        1 => (0xE0u8..=0xEF, bytes(40)).prop_map(|(m, b)| Seg::App(m, b)),
        1 => any::<u8>().prop_map(Seg::Adobe),
        1 => (prop_oneof![0u8..4, any::<u8>()], bytes(130)).prop_map(|(id, v)| Seg::Dqt(id, v)),
        3 => sof(),
        1 => (prop_oneof![0u8..2, 0x10u8..0x12, any::<u8>()], any::<[u8; 16]>(), bytes(64))
            .prop_map(|(c, counts, symbols)| Seg::Dht(c, counts, symbols)),
        2 => (
            prop::collection::vec((prop_oneof![1u8..4, any::<u8>()], any::<u8>()), 0..5),
            prop_oneof![Just(0u8), any::<u8>()],
            prop_oneof![Just(63u8), any::<u8>()],
            any::<u8>(),
        )
            .prop_map(|(c, ss, se, a)| Seg::Sos(c, ss, se, a)),
        1 => any::<u16>().prop_map(Seg::Dri),
        2 => bytes(200).prop_map(Seg::Data),
        6 => real,
        1 => (any::<u8>(), -4i32..40, bytes(24)).prop_map(|(m, d, b)| Seg::Lying(m, d, b)),
    ]
}

/// A stream from the grammar: usually SOI first (else only the sniffing is tested), then
/// segments, often a real file's skeleton with some of its segments replaced, and maybe cut.
fn grammar_jpeg() -> impl Strategy<Value = (Vec<Seg>, Option<usize>)> {
    let skeleton_source = prop::sample::select(
        corpus()
            .files
            .iter()
            .filter(|(name, bytes)| name.ends_with(".jpg") && bytes.len() < 16 << 10)
            .map(|(_, bytes)| split_segments(bytes))
            .collect::<Vec<_>>(),
    );
    let from_skeleton = (
        skeleton_source,
        prop::collection::vec((any::<prop::sample::Index>(), seg(), 0u8..3), 1..4),
    )
        .prop_map(|(skeleton, edits)| {
            let mut segs: Vec<Seg> = std::iter::once(Seg::Bare(0xD8))
                .chain(skeleton.into_iter().map(Seg::Real))
                .chain(std::iter::once(Seg::Bare(0xD9)))
                .collect();
            for (at, seg, how) in edits {
                // Replace, insert before, or remove; never the leading SOI.
                let i = 1 + at.index(segs.len() - 1);
                match how {
                    0 => segs[i] = seg,
                    1 => segs.insert(i, seg),
                    _ if segs.len() > 2 => {
                        segs.remove(i);
                    }
                    _ => {}
                }
            }
            segs
        });
    let from_scratch = (
        prop::bool::weighted(0.9),
        prop::collection::vec(seg(), 0..12),
    )
        .prop_map(|(soi, rest)| {
            let mut segs = Vec::new();
            if soi {
                segs.push(Seg::Bare(0xD8));
            }
            segs.extend(rest);
            segs
        });
    let cut = prop_oneof![3 => Just(None), 1 => any::<usize>().prop_map(Some)];
    (prop_oneof![from_skeleton, from_scratch], cut)
}

fn encode(segs: &[Seg], cut: Option<usize>) -> Vec<u8> {
    let mut bytes = Vec::new();
    for seg in segs {
        seg.encode(&mut bytes);
    }
    if let Some(cut) = cut {
        bytes.truncate(cut % (bytes.len() + 1));
    }
    bytes
}

/// The frame the stream declares when it starts with SOI and its first SOF is one both
/// backends take (8-bit; 1, 3 or 4 components; a Huffman baseline, extended or progressive code)
/// behind nothing but well-formed segments, so that the marker walk reaches it as written.
fn declared_frame(segs: &[Seg]) -> Option<(u16, u16)> {
    let (Seg::Bare(0xD8), rest) = segs.split_first()? else {
        return None;
    };
    for seg in rest {
        match seg {
            Seg::Sof {
                code: 0xC0..=0xC2,
                precision: 8,
                height,
                width,
                components,
            } if matches!(components.len(), 1 | 3 | 4) => return Some((*width, *height)),
            Seg::Bare(0x01 | 0xD0..=0xD7) | Seg::App(..) | Seg::Adobe(_) | Seg::Dqt(..) => {}
            Seg::Dht(..) | Seg::Dri(_) => {}
            Seg::Real(bytes)
                if !bytes
                    .get(1)
                    .is_some_and(|&m| m == 0xDA || (0xC0..=0xCF).contains(&m)) => {}
            _ => return None,
        }
    }
    None
}

// ---------------------------------------------------------------------------------------------
// Corpus edits.

/// One edit of a corpus file, positions as fractions of its length so they shrink well.
#[derive(Clone, Debug)]
enum Edit {
    /// Overwrite the byte at this point.
    Set(prop::sample::Index, u8),
    /// Insert bytes here.
    Insert(prop::sample::Index, Vec<u8>),
    /// Remove up to this many bytes from here.
    Remove(prop::sample::Index, usize),
    /// Write a big-endian 16-bit value here (a length, a width, a height).
    Word(prop::sample::Index, u16),
    /// Copy a slice of the file over another place (a segment seen twice, out of order).
    Copy(prop::sample::Index, prop::sample::Index, usize),
    /// Cut the file here.
    Truncate(prop::sample::Index),
}

fn edit() -> impl Strategy<Value = Edit> {
    let index = any::<prop::sample::Index>;
    prop_oneof![
        4 => (index(), any::<u8>()).prop_map(|(i, v)| Edit::Set(i, v)),
        1 => (index(), bytes(8)).prop_map(|(i, b)| Edit::Insert(i, b)),
        1 => (index(), 1usize..64).prop_map(|(i, n)| Edit::Remove(i, n)),
        2 => (index(), prop_oneof![Just(0u16), Just(1), Just(2), Just(0xFFFF), any::<u16>()])
            .prop_map(|(i, v)| Edit::Word(i, v)),
        1 => (index(), index(), 1usize..200).prop_map(|(a, b, n)| Edit::Copy(a, b, n)),
        1 => index().prop_map(Edit::Truncate),
    ]
}

fn apply(bytes: &mut Vec<u8>, edit: &Edit) {
    // Headers and tables live in the first KiB: most edits land there.
    let at = |i: &prop::sample::Index, len: usize| {
        if i.index(4) == 0 {
            i.index(len.max(1))
        } else {
            i.index(len.clamp(1, 1024))
        }
    };
    let len = bytes.len();
    match edit {
        Edit::Set(i, v) if len > 0 => {
            let at = at(i, len);
            bytes[at] = *v;
        }
        Edit::Insert(i, b) => {
            let at = at(i, len + 1).min(len);
            bytes.splice(at..at, b.iter().copied());
        }
        Edit::Remove(i, n) if len > 0 => {
            let at = at(i, len);
            bytes.drain(at..(at + n).min(len));
        }
        Edit::Word(i, v) if len > 1 => {
            let at = at(i, len - 1);
            bytes[at..at + 2].copy_from_slice(&v.to_be_bytes());
        }
        Edit::Copy(from, to, n) if len > 0 => {
            let (from, to) = (from.index(len), at(to, len));
            let n = (*n).min(len - from).min(len - to);
            bytes.copy_within(from..from + n, to);
        }
        Edit::Truncate(i) => bytes.truncate(i.index(len + 1)),
        _ => {}
    }
}

proptest! {
    #![proptest_config(config(4096))]

    /// Anything at all, and anything behind a format's magic bytes.
    #[test]
    fn arbitrary_bytes(
        magic in prop::sample::select(vec![
            &b""[..], b"\xFF\xD8\xFF", b"\x89PNG\r\n\x1a\n", b"GIF89a", b"BM",
            b"RIFF\0\0\0\0WEBP", b"II*\0", b"MM\0*",
            b"P1\n", b"P2 ", b"P3\t", b"P4\n", b"P5\r", b"P6\n",
        ]),
        tail in bytes(512),
        probe in probe(),
    ) {
        let mut data = magic.to_vec();
        data.extend_from_slice(&tail);
        check_all(&data, probe)?;
    }
}

proptest! {
    #![proptest_config(config(4096))]

    /// JPEG streams from the marker grammar. Beyond the shared promises: a frame both backends
    /// take that declares more pixels than the limit is refused by the limit itself, whatever
    /// else is wrong after it (truncation aside, which is judged from the same walk first).
    #[test]
    fn marker_grammar((segs, cut) in grammar_jpeg(), probe in probe()) {
        let data = encode(&segs, cut);
        let [turbo, zune] = check_all(&data, probe)?;
        if let (Some((w, h)), None) = (declared_frame(&segs), cut) {
            let pixels = u64::from(w) * u64::from(h);
            for outcome in [&turbo, &zune] {
                if pixels > MAX_PIXELS {
                    prop_assert!(
                        matches!(outcome.decoded, Err(ErrorKind::TooLarge | ErrorKind::Truncated | ErrorKind::Corrupt)),
                        "a {}x{} frame: {:?}", w, h, outcome.decoded
                    );
                }
            }
        }
    }
}

proptest! {
    #![proptest_config(config(1024))]

    /// Corpus images with one to four edits: overwritten bytes and 16-bit fields, insertions,
    /// removals, copied spans, truncation.
    #[test]
    fn corpus_edits(
        file in any::<prop::sample::Index>(),
        edits in prop::collection::vec(edit(), 1..5),
        probe in probe(),
    ) {
        let corpus = corpus();
        let (_, source) = &corpus.files[file.index(corpus.files.len())];
        let mut data = source.clone();
        for e in &edits {
            apply(&mut data, e);
        }
        check_all(&data, probe)?;
    }
}

// ---------------------------------------------------------------------------------------------
// EXIF blocks.

/// One IFD entry: tag, type, count, the 4-byte field.
type Entry = (u16, u16, u32, [u8; 4]);

/// Entries near what real files hold and what breaks walkers: the orientation tag among others,
/// every type (and unknown ones), counts of 0, 1, 2 and huge, fields that point anywhere.
fn entry() -> impl Strategy<Value = Entry> {
    (
        prop_oneof![Just(274u16), Just(274), Just(270), Just(700), any::<u16>()],
        prop_oneof![0u16..=17, any::<u16>()],
        prop_oneof![
            Just(1u32),
            Just(0),
            Just(2),
            Just(10),
            Just(u32::MAX),
            any::<u32>()
        ],
        prop_oneof![
            (1u8..=8).prop_map(|k| [k, 0, 0, k]),
            (0u32..64).prop_map(u32::to_le_bytes),
            any::<[u8; 4]>(),
        ],
    )
}

/// An EXIF block (`Exif\0\0`, a TIFF header of either byte order, or a broken one, an IFD0 at a
/// given offset, out-of-line data) maybe cut, placed in APP1 segments (split in two, maybe)
/// of the corpus' good JPEG, with an XMP packet sometimes.
fn exif_jpeg() -> impl Strategy<Value = Vec<u8>> {
    (
        any::<bool>(),
        prop_oneof![
            Just(*b"II*\0"),
            Just(*b"MM\0*"),
            Just(*b"II+\0"),
            any::<[u8; 4]>()
        ],
        prop_oneof![Just(8u32), 0u32..64, any::<u32>()],
        prop::collection::vec(entry(), 0..12),
        bytes(48),
        prop::option::of(any::<prop::sample::Index>()),
        prop::option::of(any::<prop::sample::Index>()),
        prop::option::of(1u8..=9),
    )
        .prop_map(|(little, magic, ifd0, entries, tail, cut, split, xmp)| {
            let le = little && magic[0] != b'M';
            let u16b = |v: u16| if le { v.to_le_bytes() } else { v.to_be_bytes() };
            let u32b = |v: u32| if le { v.to_le_bytes() } else { v.to_be_bytes() };
            let mut block = b"Exif\0\0".to_vec();
            block.extend_from_slice(&magic);
            block.extend_from_slice(&u32b(ifd0));
            block.extend_from_slice(&u16b(entries.len() as u16));
            for (tag, typ, count, field) in &entries {
                block.extend_from_slice(&u16b(*tag));
                block.extend_from_slice(&u16b(*typ));
                block.extend_from_slice(&u32b(*count));
                block.extend_from_slice(field);
            }
            block.extend_from_slice(&u32b(0));
            block.extend_from_slice(&tail);
            if let Some(cut) = cut {
                block.truncate(6 + cut.index(block.len() - 5));
            }
            let mut segments = match split {
                Some(at) => {
                    let at = 6 + at.index(block.len() - 5);
                    let mut second = b"Exif\0\0".to_vec();
                    second.extend_from_slice(&block[at..]);
                    vec![block[..at].to_vec(), second]
                }
                None => vec![block],
            };
            if let Some(k) = xmp {
                let mut packet = b"http://ns.adobe.com/xap/1.0/\0<x tiff:Orientation=\"".to_vec();
                packet.extend_from_slice(format!("{k}\"/>").as_bytes());
                segments.push(packet);
            }
            let good = &corpus().good;
            let mut data = good[..2].to_vec();
            for body in segments {
                data.extend_from_slice(&[0xFF, 0xE1]);
                data.extend_from_slice(&(body.len() as u16 + 2).to_be_bytes());
                data.extend_from_slice(&body);
            }
            data.extend_from_slice(&good[2..]);
            data
        })
}

proptest! {
    #![proptest_config(config(2048))]

    /// JPEGs whose EXIF blocks are built from hostile parts: the shared promises, the EXIF ones
    /// among them (a transposing context decodes exactly the plain decode transposed, whole and
    /// by region), and the file still decodes (EXIF never makes a good JPEG fail).
    #[test]
    fn exif_blocks(data in exif_jpeg(), probe in probe()) {
        let [turbo, zune] = check_all(&data, probe)?;
        prop_assert!(turbo.decoded.is_ok() && zune.decoded.is_ok());
    }
}

// ---------------------------------------------------------------------------------------------
// PNM headers.

/// A PNM built from parts: what the header declares, and the bytes.
#[derive(Clone, Debug)]
struct Pnm {
    /// 1 to 6, for P1 to P6.
    magic: u8,
    width: u32,
    height: u32,
    maxval: u32,
    /// Whether the raster is exactly what the header asks for (bytes of a binary one, valid
    /// samples of a plain one) and uncut; else random bytes or samples.
    exact: bool,
    /// Whether the header is all there (the cut, if any, fell after it).
    whole_header: bool,
    bytes: Vec<u8>,
}

/// Headers with hostile sides and maxvals, comments and every separator, over a raster that is
/// the right length, random bytes, or plain-text samples, maybe cut.
fn pnm() -> impl Strategy<Value = Pnm> {
    let side = || {
        prop_oneof![
            4 => 1u32..48,
            1 => Just(0u32),
            1 => Just(1024u32),
            1 => Just(1025u32),
            1 => Just(u32::MAX),
            1 => any::<u32>(),
        ]
    };
    let maxval = prop_oneof![
        6 => Just(255u32),
        1 => prop::sample::select(vec![0u32, 1, 15, 256, 1023, 65535, 65536]),
        1 => any::<u32>(),
    ];
    let space = prop::sample::select(vec![&b" "[..], b"\n", b"\t", b"\r\n", b"\x0b", b"  \n"]);
    let comment = prop_oneof![3 => Just(None), 1 => Just(Some(&b"# a comment\n"[..]))];
    let plain_samples = prop::collection::vec(
        prop_oneof![4 => 0u32..2, 4 => 0u32..256, 1 => any::<u32>()],
        0..200,
    );
    (
        1u8..=6,
        side(),
        side(),
        maxval,
        (space.clone(), space, comment),
        prop::bool::weighted(0.6),
        (bytes(512), plain_samples),
        prop_oneof![4 => Just(None), 1 => any::<prop::sample::Index>().prop_map(Some)],
    )
        .prop_map(
            |(magic, width, height, maxval, (sep, last, comment), exact, (noise, samples), cut)| {
                let mut bytes = format!("P{magic}").into_bytes();
                bytes.extend_from_slice(sep);
                bytes.extend_from_slice(comment.unwrap_or_default());
                bytes.extend_from_slice(format!("{width}").as_bytes());
                bytes.extend_from_slice(sep);
                bytes.extend_from_slice(format!("{height}").as_bytes());
                if magic != 1 && magic != 4 {
                    bytes.extend_from_slice(sep);
                    bytes.extend_from_slice(format!("{maxval}").as_bytes());
                }
                // The single whitespace byte that ends a binary header.
                bytes.push(last[0]);
                let header_len = bytes.len();
                // Bytes of a binary raster, samples of a plain one.
                let row = match magic {
                    4 => u64::from(width).div_ceil(8),
                    3 | 6 => 3 * u64::from(width),
                    _ => u64::from(width),
                };
                let needed = row.saturating_mul(u64::from(height));
                let exact = exact && needed <= 1 << 14;
                let mut values = noise.iter().copied().chain(std::iter::repeat(0x80)).cycle();
                if exact && magic <= 3 {
                    for v in values.by_ref().take(needed as usize) {
                        let v = if magic == 1 { v & 1 } else { v };
                        bytes.extend_from_slice(format!("{v}\n").as_bytes());
                    }
                } else if exact {
                    bytes.extend(values.take(needed as usize));
                } else if magic <= 3 {
                    for v in samples {
                        bytes.extend_from_slice(format!("{v} ").as_bytes());
                    }
                } else {
                    bytes.extend_from_slice(&noise);
                }
                if let Some(cut) = cut {
                    bytes.truncate(cut.index(bytes.len() + 1));
                }
                Pnm {
                    magic,
                    width,
                    height,
                    maxval,
                    exact: exact && cut.is_none(),
                    whole_header: bytes.len() >= header_len,
                    bytes,
                }
            },
        )
}

proptest! {
    #![proptest_config(config(2048))]

    /// PNM streams from parts. Beyond the shared promises: a header of a kind decoded natively
    /// (a bitmap, or maxval 255) that declares more pixels than the limit is refused by the
    /// limit; a graymap or pixmap with another valid maxval is unsupported (Pillow rescales
    /// it); and one of a native kind whose raster is complete decodes, at its size.
    #[test]
    fn pnm_headers(pnm in pnm(), probe in probe()) {
        let [turbo, zune] = check_all(&pnm.bytes, probe)?;
        let bitmap = pnm.magic == 1 || pnm.magic == 4;
        let native = bitmap || pnm.maxval == 255;
        let pixels = u64::from(pnm.width) * u64::from(pnm.height);
        for outcome in [&turbo, &zune] {
            if !pnm.whole_header {
                continue;
            }
            // A pixmap whose bytes (3 a pixel) overflow 64 bits is refused by the `image`
            // crate's header reader, before the limit is looked at.
            let overflows = pnm.magic % 3 == 0 && pixels.checked_mul(3).is_none();
            if native && overflows {
                prop_assert!(
                    matches!(outcome.decoded, Err(ErrorKind::TooLarge | ErrorKind::Unsupported)),
                    "P{} {}x{}: {:?}", pnm.magic, pnm.width, pnm.height, outcome.decoded
                );
            } else if native && pixels > MAX_PIXELS {
                prop_assert!(
                    matches!(outcome.decoded, Err(ErrorKind::TooLarge)),
                    "P{} {}x{}: {:?}", pnm.magic, pnm.width, pnm.height, outcome.decoded
                );
            } else if !native && (1..=65535).contains(&pnm.maxval) {
                prop_assert!(
                    matches!(outcome.decoded, Err(ErrorKind::Unsupported)),
                    "P{} maxval {}: {:?}", pnm.magic, pnm.maxval, outcome.decoded
                );
            } else if native && pnm.exact && pixels > 0 {
                let decoded = outcome.decoded.as_ref();
                prop_assert!(
                    decoded.is_ok_and(|i| (i.width, i.height, i.format) == (pnm.width, pnm.height, Format::Pnm)),
                    "P{} {}x{}: {:?}", pnm.magic, pnm.width, pnm.height, decoded
                );
            }
        }
    }
}

/// A binary PNM whose raster is shorter than its header says is refused as truncated from the
/// header and the length, before the image is allocated: a 30-byte file claiming a megapixel
/// must not cost 3 MB.
#[test]
fn a_pnm_raster_shorter_than_its_header_allocates_nothing() {
    let mut ctx =
        DecodeContext::new(DecodeOptions::default().max_pixels(MAX_PIXELS)).expect("context");
    for header in [
        &b"P6\n1000 1000\n255\n"[..],
        b"P5 1000 1000 255 ",
        b"P4\n1000 1000\n",
    ] {
        let mut data = header.to_vec();
        data.extend_from_slice(&[0x55; 16]);
        let mut out = RgbImage::new();
        let info = ctx.info(&data).expect("the header reads");
        assert_eq!(
            (info.width, info.height, info.format),
            (1000, 1000, Format::Pnm)
        );
        fuzz_props::Tracking::reset();
        let decoded = ctx.decode(&data, &mut out);
        let largest = fuzz_props::Tracking::largest();
        assert!(
            matches!(decoded, Err(Error::Truncated { .. })),
            "{decoded:?}"
        );
        assert!(largest < 64 << 10, "allocated {largest} bytes");
        assert_eq!(out.as_raw().len(), 0);
        fuzz_props::check_decode(&mut ctx, &data, Probe::default(), &mut out)
            .expect("the shared checks pass");
    }
}

/// The grammar's bomb property fails when the limit is not what refuses a huge frame: a real
/// file's SOF rewritten to 65535x65535 is `TooLarge` from both backends, from every entry point.
#[test]
fn a_huge_frame_is_refused_by_the_limit() {
    let mut data = corpus().files[0].1.clone();
    let sof = data
        .windows(2)
        .position(|w| w == [0xFF, 0xC0])
        .expect("a baseline frame header");
    data[sof + 5..sof + 9].copy_from_slice(&[0xFF, 0xFF, 0xFF, 0xFF]);
    for decoder in [Decoder::Turbo, Decoder::Zune] {
        let options = DecodeOptions::default()
            .decoder(decoder)
            .max_pixels(MAX_PIXELS);
        let mut ctx = DecodeContext::new(options).expect("context");
        let mut out = RgbImage::new();
        let info = ctx.info(&data).expect("the header reads");
        assert_eq!(
            (info.width, info.height, info.format),
            (65535, 65535, Format::Jpeg)
        );
        assert!(matches!(
            ctx.decode(&data, &mut out),
            Err(Error::TooLarge { .. })
        ));
        let rect = ferroloader_transforms::CropRect {
            top: 0,
            left: 0,
            height: 8,
            width: 8,
        };
        assert!(matches!(
            ctx.decode_region(&data, rect, &mut out),
            Err(Error::TooLarge { .. })
        ));
        assert!(matches!(
            ctx.decode_region_scaled(&data, rect, 1, 1, &mut out),
            Err(Error::TooLarge { .. })
        ));
        fuzz_props::check_decode(&mut ctx, &data, Probe::default(), &mut out)
            .expect("the shared checks pass");
    }
}

// ---------------------------------------------------------------------------------------------
// Findings, each kept as a named regression test.

/// Found by `marker_grammar` and `corpus_edits`: `decode_region` promised to refuse whatever
/// the full decode refuses, but libjpeg-turbo stops reading a sequential JPEG after the last
/// row of the region, so damage in the entropy-coded data below it is never seen (a region
/// decode would have to decode the rest of the scan to see it, which costs what the region
/// saves). The promise now covers what the region reads: the same file is refused as soon as
/// the region reaches the damaged rows.
#[test]
fn damage_below_a_region_is_seen_only_by_regions_that_reach_it() {
    let mut data = fixtures::read_fixture("decode", "jpeg_420_q75.jpg");
    // A marker the decoder does not know, in the entropy data of the last rows.
    let at = data.len() - 64;
    data[at..at + 2].copy_from_slice(&[0xFF, 0x21]);
    let mut ctx = DecodeContext::new(DecodeOptions::default()).expect("context");
    let mut out = RgbImage::new();
    assert!(matches!(
        ctx.decode(&data, &mut out),
        Err(Error::Corrupt { .. })
    ));
    let top = ferroloader_transforms::CropRect {
        top: 0,
        left: 100,
        height: 64,
        width: 64,
    };
    let inner = ctx
        .decode_region(&data, top, &mut out)
        .expect("the rows above the damage");
    assert_eq!((inner.width, inner.height), (64, 64));
    let bottom = ferroloader_transforms::CropRect { top: 311, ..top };
    assert!(matches!(
        ctx.decode_region(&data, bottom, &mut out),
        Err(Error::Corrupt { .. })
    ));
    assert!(matches!(
        ctx.decode_region_scaled(&data, bottom, 8, 8, &mut out),
        Err(Error::Corrupt { .. })
    ));
}

/// Found by the cargo-fuzz `decode` target: a WebP whose canvas (VP8X) is small but whose VP8
/// frame header claims 5809x16258 passed the pixel limit (checked on the canvas) and image-webp
/// allocated 95 MB of planes for the frame before failing. Frames are now held to the limit too.
#[test]
fn a_webp_frame_larger_than_its_canvas_is_refused_by_the_limit() {
    // VP8X (canvas 177x119), ALPH, VP8.
    let mut data = fixtures::read_fixture("decode", "webp_lossy_rgba.webp");
    assert_eq!(&data[12..16], b"VP8X");
    let vp8 = data
        .windows(4)
        .position(|w| w == b"VP8 ")
        .expect("a lossy frame");
    let frame = vp8 + 8;
    assert_eq!(data[frame + 3..frame + 6], [0x9D, 0x01, 0x2A]);
    data[frame + 6..frame + 8].copy_from_slice(&5809u16.to_le_bytes());
    data[frame + 8..frame + 10].copy_from_slice(&16258u16.to_le_bytes());
    assert_frame_refused_by_the_limit(&data, (177, 119), (5809, 16258));
}

/// `data`, whose header reports a `screen` (width, height) within the limit, is `TooLarge` for
/// its first `frame` (width, height) before anything near that size is allocated.
fn assert_frame_refused_by_the_limit(data: &[u8], screen: (u32, u32), frame: (u32, u32)) {
    let mut ctx =
        DecodeContext::new(DecodeOptions::default().max_pixels(MAX_PIXELS)).expect("context");
    let mut out = RgbImage::new();
    let info = ctx.info(data).expect("the header reads");
    assert_eq!((info.width, info.height), screen);
    fuzz_props::Tracking::reset();
    let decoded = ctx.decode(data, &mut out);
    let largest = fuzz_props::Tracking::largest();
    assert!(
        matches!(decoded, Err(Error::TooLarge { width, height, .. }) if (width, height) == frame),
        "{decoded:?}"
    );
    assert!(largest < 1 << 20, "allocated {largest} bytes");
    fuzz_props::check_decode(&mut ctx, data, Probe::default(), &mut out)
        .expect("the shared checks pass");
}

/// Found by `corpus_edits` (in CI): a GIF whose logical screen is 163x109 but whose first frame
/// descriptor claims 1793x61443 (six bytes of the file copied over it) passed the pixel limit,
/// checked on the screen, and `image` allocated 440 MB for the frame, within its own allocation
/// cap. The first frame is now held to the limit too.
#[test]
fn a_gif_frame_larger_than_its_screen_is_refused_by_the_limit() {
    let mut data = fixtures::read_fixture("decode", "gif_p.gif");
    // Header (6), logical screen (7), a 256-entry global colour table (768): the frame follows.
    assert_eq!(&data[..6], b"GIF87a");
    assert_eq!(data[10] & 0x87, 0x87);
    let descriptor = 6 + 7 + 768;
    assert_eq!(data[descriptor], 0x2C, "an image descriptor");
    // Left, top, width, height, little-endian.
    data[descriptor + 5..descriptor + 9].copy_from_slice(&[0x01, 0x07, 0x03, 0xF0]);
    assert_frame_refused_by_the_limit(&data, (163, 109), (1793, 61443));
}
