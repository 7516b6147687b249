//! Datasets on real files in a temporary directory: `ImageFolder`'s torchvision semantics and
//! errors, `FileList` parsing, and read failures (missing, unreadable) through the loader.

use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use ferroloader_loader::transforms::Error as TransformError;
use ferroloader_loader::{
    Column, DType, ErrorPolicy, FileList, FileListOptions, ImageFolder, ImageFolderOptions,
    ListFormat, Loader, LoaderError, LoaderOptions, Op, OpHooks, SampleKey, SampleLayout,
    SampleProcessor, SlotMut, Source, TransformOp,
};

/// Writes the first 16 bytes of each file (zero-padded) into a `[16, 1, 1]` u8 slot.
struct Head;

impl SampleProcessor for Head {
    type Scratch = ();
    fn new_scratch(&self) {}
    fn sample_layout(&self) -> SampleLayout {
        SampleLayout::hwc(DType::U8, 16, 1, 1)
    }
    fn process(
        &self,
        bytes: &[u8],
        _key: SampleKey,
        _scratch: &mut (),
        out: SlotMut<'_>,
        hooks: &mut dyn OpHooks,
    ) -> Result<(), TransformError> {
        hooks.enter(Op::Transform(TransformOp::Decode));
        if let SlotMut::U8(out) = out {
            out.fill(0);
            let n = bytes.len().min(out.len());
            out[..n].copy_from_slice(&bytes[..n]);
        }
        hooks.exit(Op::Transform(TransformOp::Decode));
        Ok(())
    }
}

fn touch(path: &Path) {
    if let Some(dir) = path.parent() {
        fs::create_dir_all(dir).expect("mkdir");
    }
    let name = path
        .file_name()
        .and_then(|n| n.to_str())
        .expect("utf-8 name");
    fs::write(path, format!("img:{name}")).expect("write");
}

fn symlink(target: impl AsRef<Path>, link: impl AsRef<Path>) {
    std::os::unix::fs::symlink(target, link).expect("symlink");
}

fn rel(root: &Path, samples: &[(PathBuf, usize)]) -> Vec<(String, usize)> {
    samples
        .iter()
        .map(|(p, c)| {
            let r = p.strip_prefix(root).expect("under root");
            (r.to_string_lossy().into_owned(), *c)
        })
        .collect()
}

#[test]
fn image_folder_lists_like_torchvision() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("root");
    for f in [
        "b/z.JPG",
        "b/a.png",
        "b/notes.txt",
        "b/sub/c.jpeg",
        "a/x.Tiff",
        "a/y.webp",
        "a/.h.png",
        "C/1.bmp",
        "k/0.jpg",
        "k/a/1.jpg",
        "k/a-b/2.jpg",
        "k/a/x/3.jpg",
        "readme.jpg",
    ] {
        touch(&root.join(f));
    }
    touch(&tmp.path().join("outside/q.PGM"));
    // A directory symlink inside a class is followed (os.walk(followlinks=True)), a symlinked
    // class folder is a class, a broken link at the top is not.
    symlink("../a", root.join("b/lnk"));
    symlink(tmp.path().join("outside"), root.join("ext_link"));
    symlink(tmp.path().join("nowhere"), root.join("broken"));

    let ds = ImageFolder::new(&root).expect("valid tree");
    assert_eq!(ds.classes(), ["C", "a", "b", "ext_link", "k"]);
    assert_eq!(ds.class_index("b"), Some(2));
    assert_eq!(ds.class_index("readme.jpg"), None);
    // Expected order computed with torchvision's make_dataset on the same tree: folders sorted
    // by path string ("k/a-b" before "k/a/x"), files sorted by name, extensions matched on the
    // lowercased name.
    let want: Vec<(String, usize)> = [
        ("C/1.bmp", 0),
        ("a/.h.png", 1),
        ("a/x.Tiff", 1),
        ("a/y.webp", 1),
        ("b/a.png", 2),
        ("b/z.JPG", 2),
        ("b/lnk/.h.png", 2),
        ("b/lnk/x.Tiff", 2),
        ("b/lnk/y.webp", 2),
        ("b/sub/c.jpeg", 2),
        ("ext_link/q.PGM", 3),
        ("k/0.jpg", 4),
        ("k/a/1.jpg", 4),
        ("k/a-b/2.jpg", 4),
        ("k/a/x/3.jpg", 4),
    ]
    .iter()
    .map(|(p, c)| ((*p).to_owned(), *c))
    .collect();
    assert_eq!(rel(&root, ds.samples()), want);
    assert_eq!(ds.len(), want.len());
    assert_eq!(ds.label(14), 4);
    let mut buf = Vec::new();
    assert_eq!(ds.read(5, &mut buf).expect("readable"), b"img:z.JPG");

    // Only some extensions, given in lowercase.
    let only_png = ImageFolderOptions::default()
        .extensions([".png"])
        .allow_empty(true);
    let ds = ImageFolder::with_options(&root, &only_png).expect("valid tree");
    assert_eq!(
        rel(&root, ds.samples()),
        vec![
            ("a/.h.png".to_owned(), 1),
            ("b/a.png".to_owned(), 2),
            ("b/lnk/.h.png".to_owned(), 2)
        ]
    );
    assert_eq!(ds.classes().len(), 5, "empty classes keep their label");
}

#[test]
fn image_folder_does_not_loop_on_a_symlink_cycle() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    touch(&root.join("k/a/1.jpg"));
    touch(&root.join("k/a/x/3.jpg"));
    symlink("..", root.join("k/a/x/up"));
    let ds = ImageFolder::new(root).expect("valid tree");
    assert_eq!(
        rel(root, ds.samples()),
        vec![("k/a/1.jpg".to_owned(), 0), ("k/a/x/3.jpg".to_owned(), 0)]
    );
}

#[test]
fn image_folder_errors_like_torchvision() {
    let tmp = tempfile::tempdir().expect("tempdir");

    let missing = tmp.path().join("missing");
    match ImageFolder::new(&missing) {
        Err(LoaderError::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }

    let flat = tmp.path().join("flat");
    touch(&flat.join("a.jpg"));
    let err = ImageFolder::new(&flat).expect_err("no class folder");
    assert!(matches!(err, LoaderError::NoClassFolders { .. }));
    assert_eq!(
        err.to_string(),
        format!("Couldn't find any class folder in {}.", flat.display())
    );

    let partly = tmp.path().join("partly");
    touch(&partly.join("good/a.jpg"));
    touch(&partly.join("zz/readme.txt"));
    fs::create_dir_all(partly.join("empty")).expect("mkdir");
    let err = ImageFolder::new(&partly).expect_err("empty classes");
    assert_eq!(
        err.to_string(),
        "Found no valid file for the classes empty, zz. Supported extensions are: \
         .jpg, .jpeg, .png, .ppm, .bmp, .pgm, .tif, .tiff, .webp"
    );
    let ds = ImageFolder::with_options(&partly, &ImageFolderOptions::default().allow_empty(true))
        .expect("allowed");
    assert_eq!(ds.classes(), ["empty", "good", "zz"]);
    assert_eq!(ds.len(), 1);
    assert_eq!(ds.label(0), 1);
}

#[test]
fn missing_and_unreadable_files_are_reported_or_skipped() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path();
    for i in 0..12 {
        touch(&root.join(format!("c{}/{i:02}.jpg", i % 2)));
    }
    // A symlink to itself is listed (it is not a directory) but cannot be opened.
    symlink("05b.jpg", root.join("c1/05b.jpg"));
    let ds = ImageFolder::new(root).expect("valid tree");
    let names: Vec<String> = rel(root, ds.samples())
        .into_iter()
        .map(|(p, _)| p)
        .collect();
    let loop_pos = names
        .iter()
        .position(|p| p == "c1/05b.jpg")
        .expect("listed");
    fs::remove_file(root.join("c0/04.jpg")).expect("rm");
    let gone_pos = names.iter().position(|p| p == "c0/04.jpg").expect("listed");

    let options = LoaderOptions::default().batch_size(4).num_workers(2);
    let loader = Loader::new(ds.clone(), Head, options.clone()).expect("valid");
    let mut iter = loader.epoch(0);
    let mut delivered = 0;
    let err = loop {
        match iter.next().expect("an error comes before the end") {
            Ok(b) => delivered += b.len(),
            Err(e) => break e,
        }
    };
    assert_eq!(delivered, 0, "the missing file is in the first batch");
    match &err {
        LoaderError::Read {
            index,
            path,
            source,
            ..
        } => {
            assert_eq!(*index, gone_pos);
            assert_eq!(path, &root.join("c0/04.jpg"));
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected a read error, got {other:?}"),
    }
    assert_eq!(err.op(), Some(Op::Read));
    assert!(err.to_string().contains("c0/04.jpg"), "{err}");
    drop(iter);

    let loader = Loader::new(ds, Head, options.on_error(ErrorPolicy::Skip)).expect("valid");
    let mut iter = loader.epoch(0);
    let mut got = Vec::new();
    for batch in &mut iter {
        let batch = batch.expect("skipped, not raised");
        for slot in 0..batch.len() {
            let head = batch.sample_bytes(slot);
            let name = &names[batch.indices()[slot]];
            let file = name.rsplit('/').next().expect("a name");
            let want = format!("img:{file}");
            let n = want.len().min(16);
            assert_eq!(&head[..n], &want.as_bytes()[..n]);
            got.push(batch.indices()[slot]);
        }
    }
    let skipped: Vec<usize> = iter.skipped().iter().map(|s| s.index).collect();
    let mut want_skipped = vec![gone_pos, loop_pos];
    want_skipped.sort_unstable();
    assert_eq!(skipped, want_skipped);
    assert!(iter
        .skipped()
        .iter()
        .all(|s| matches!(s.error, LoaderError::Read { .. })));
    assert_eq!(got.len(), 11);
    assert!(!got.contains(&gone_pos) && !got.contains(&loop_pos));
}

#[cfg(unix)]
#[test]
fn class_folders_that_differ_only_in_undecodable_bytes_stay_two_classes() {
    use std::ffi::OsStr;
    use std::os::unix::ffi::OsStrExt;
    let tmp = tempfile::tempdir().expect("tempdir");
    let e9 = OsStr::from_bytes(b"cl\xe9");
    let ea = OsStr::from_bytes(b"cl\xea");
    touch(&tmp.path().join(e9).join("a.jpg"));
    touch(&tmp.path().join(ea).join("b.jpg"));
    let odd = tmp.path().join(ea).join(OsStr::from_bytes(b"c\xff.jpg"));
    fs::write(&odd, b"img").expect("write");
    let ds = ImageFolder::new(tmp.path()).expect("valid");
    assert_eq!(ds.classes(), [e9, ea]);
    assert_eq!(ds.class_index(ea), Some(1));
    assert_eq!(ds.len(), 3);
    assert_eq!(
        ds.samples()[2].0,
        tmp.path().join(ea).join(OsStr::from_bytes(b"c\xff.jpg"))
    );
}

#[test]
fn file_list_parses_csv_and_tsv_with_or_without_header() {
    let tmp = tempfile::tempdir().expect("tempdir");
    let root = tmp.path().join("imgs");
    touch(&root.join("a.jpg"));
    touch(&root.join("sub/b.png"));

    let csv = tmp.path().join("train.csv");
    fs::write(
        &csv,
        "path,label\na.jpg,3\n\n  sub/b.png , 7 \n/abs/c.jpg,-1\n",
    )
    .expect("write");
    let list = FileList::new(&csv, &root).expect("valid");
    assert_eq!(list.len(), 3);
    assert_eq!(
        list.paths(),
        [
            root.join("a.jpg"),
            root.join("sub/b.png"),
            PathBuf::from("/abs/c.jpg")
        ]
    );
    assert_eq!(list.labels(), [3, 7, -1]);
    let mut buf = Vec::new();
    assert_eq!(list.read(1, &mut buf).expect("readable"), b"img:b.png");

    let tsv = tmp.path().join("train.tsv");
    fs::write(&tsv, "a.jpg\t1\nsub/b.png\t2\n").expect("write");
    let list = FileList::new(&tsv, &root).expect("valid");
    assert_eq!(list.labels(), [1, 2]);

    // A forced header drops the first row even when it looks like data.
    let list = FileList::with_options(&tsv, &root, &FileListOptions::default().has_header(true))
        .expect("valid");
    assert_eq!(list.labels(), [2]);
    let semi = FileList::from_bytes(
        b"a.jpg;4\n",
        "inline",
        &root,
        &FileListOptions::default().delimiter(b';'),
    )
    .expect("valid");
    assert_eq!(semi.labels(), [4]);
}

#[test]
fn file_list_errors_name_the_file_and_line() {
    let root = Path::new("/data");
    let parse = |text: &str, options: &FileListOptions| {
        FileList::from_bytes(text.as_bytes(), "list.csv", root, options)
            .map(|_| ())
            .expect_err("malformed")
            .to_string()
    };
    let auto = FileListOptions::default();
    assert_eq!(
        parse("path,label\na.jpg,1\nb.jpg,x\n", &auto),
        "list.csv:3: label \"x\" is not an integer, but line 2's is: labels are all integers \
         or all class names"
    );
    assert_eq!(
        parse("a.jpg,1\nb.jpg\n", &auto),
        "list.csv:2: expected at least 2 fields, found 1 in [\"b.jpg\"]"
    );
    assert_eq!(parse("a.jpg,1\n,2\n", &auto), "list.csv:2: empty path");
    assert_eq!(
        parse("path,label\n", &auto),
        "list.csv:1: the list has no samples"
    );
    // A header the caller denies is data: its label is a class name among integers.
    assert_eq!(
        parse(
            "path,label\na.jpg,1\n",
            &FileListOptions::default().has_header(false)
        ),
        "list.csv:2: label \"1\" is an integer, but line 1's (\"label\") is a class name: \
         labels are all integers or all class names"
    );
    // The row a guess used to drop silently: a first row that is not a header by its names.
    assert_eq!(
        parse("file,class\na.jpg,1\n", &auto),
        "list.csv:2: label \"1\" is an integer, but line 1's (\"class\") is a class name: \
         labels are all integers or all class names"
    );
    assert_eq!(
        parse(
            "file,y\na.jpg,1\n",
            &FileListOptions::default().label_column(Column::Name("label".into()))
        ),
        "list.csv:1: column \"label\" is not in the first row [\"file\", \"y\"]"
    );
    assert_eq!(
        parse(
            "file,y\na.jpg,1\n",
            &FileListOptions::default()
                .label_column(Column::Name("y".into()))
                .has_header(false)
        ),
        "list.csv:1: columns are named, but has_header is false: there is no header to find \
         them in"
    );
    let err = FileList::from_bytes(b"a.jpg,1\nb\xff.jpg,2\n", "list.csv", root, &auto)
        .expect_err("not utf-8");
    assert!(
        matches!(err, LoaderError::FileList { line: 2, .. }),
        "{err:?}"
    );
    let jsonl = |text: &str| {
        FileList::from_bytes(text.as_bytes(), "list.jsonl", root, &auto)
            .map(|_| ())
            .expect_err("malformed")
            .to_string()
    };
    assert_eq!(
        jsonl("{\"path\": \"a.jpg\", \"label\": 1}\n{\"path\": \"b.jpg\"}\n"),
        "list.jsonl:2: no key \"label\""
    );
    assert_eq!(
        jsonl("{\"path\": \"a.jpg\", \"label\": 1.5}\n"),
        "list.jsonl:1: key \"label\" holds 1.5, not a string or an integer"
    );
    assert!(jsonl("[1, 2]\n").starts_with("list.jsonl:1: expected a JSON object"));
    assert!(jsonl("{\"path\": \n").starts_with("list.jsonl:1: not JSON"));

    let missing = Path::new("/definitely/not/here.csv");
    match FileList::new(missing, root) {
        Err(LoaderError::Io { path, source }) => {
            assert_eq!(path, missing);
            assert_eq!(source.kind(), io::ErrorKind::NotFound);
        }
        other => panic!("expected an I/O error, got {other:?}"),
    }
}

#[test]
fn file_list_columns_by_name_or_index_and_class_name_labels() {
    let root = Path::new("/data");
    let parse = |text: &str, list: &str, options: &FileListOptions| {
        FileList::from_bytes(text.as_bytes(), list, root, options).expect("valid")
    };
    let auto = FileListOptions::default();
    // Named columns anywhere in the header, extra columns ignored.
    let list = parse(
        "id,split,label,path,w\n7,train,3,a.jpg,10\n8,train,1,b.jpg,20\n",
        "l.csv",
        &auto,
    );
    assert_eq!(list.paths(), [root.join("a.jpg"), root.join("b.jpg")]);
    assert_eq!(list.labels(), [3, 1]);
    assert!(list.classes().is_empty());
    // Caller-named columns; string labels map to sorted class indices as ImageFolder's do.
    let named = FileListOptions::default()
        .path_column(Column::Name("file".into()))
        .label_column(Column::Name("species".into()));
    let list = parse(
        "species,file\ncat,a.jpg\ndog,b.jpg\nant,c.jpg\ncat,d.jpg\n",
        "l.csv",
        &named,
    );
    assert_eq!(list.classes(), ["ant", "cat", "dog"]);
    assert_eq!(list.labels(), [1, 2, 0, 1]);
    // Columns by index, no header: every row is data.
    let by_index = FileListOptions::default()
        .path_column(Column::Index(2))
        .label_column(Column::Index(0));
    let list = parse("5,x,a.jpg\n6,y,b.jpg\n", "l.csv", &by_index);
    assert_eq!(list.labels(), [5, 6]);
    assert_eq!(list.paths()[1], root.join("b.jpg"));
    // Class names without a header: the first row is data too.
    let list = parse("a.jpg,zebra\nb.jpg,ant\n", "l.csv", &auto);
    assert_eq!(list.classes(), ["ant", "zebra"]);
    assert_eq!(list.labels(), [1, 0]);
    // JSON Lines, by extension or by option; labels as numbers or names.
    let list = parse(
        "{\"path\": \"a.jpg\", \"label\": 2, \"extra\": [1]}\n\n{\"label\": 0, \"path\": \"b.jpg\"}\n",
        "l.jsonl",
        &auto,
    );
    assert_eq!(list.labels(), [2, 0]);
    let list = parse(
        "{\"f\": \"a.jpg\", \"y\": \"b\"}\n{\"f\": \"b.jpg\", \"y\": \"a\"}\n",
        "listing.txt",
        &FileListOptions::default()
            .format(ListFormat::JsonLines)
            .path_column(Column::Name("f".into()))
            .label_column(Column::Name("y".into())),
    );
    assert_eq!(list.classes(), ["a", "b"]);
    assert_eq!(list.labels(), [1, 0]);
}

#[test]
fn a_directory_in_a_file_list_is_an_unreadable_sample() {
    let tmp = tempfile::tempdir().expect("tempdir");
    touch(&tmp.path().join("a.jpg"));
    fs::create_dir(tmp.path().join("dir.jpg")).expect("mkdir");
    let list = FileList::from_bytes(
        b"a.jpg,0\ndir.jpg,1\na.jpg,2\n",
        "inline",
        tmp.path(),
        &FileListOptions::default(),
    )
    .expect("valid");
    let options = LoaderOptions::default()
        .batch_size(2)
        .num_workers(2)
        .on_error(ErrorPolicy::Skip);
    let loader = Loader::new(list, Head, options).expect("valid");
    let mut iter = loader.epoch(0);
    let batches: Vec<_> = (&mut iter).map(|b| b.expect("skipped")).collect();
    assert_eq!(batches.len(), 1);
    assert_eq!(batches[0].labels(), [0, 2]);
    assert_eq!(batches[0].skipped(), 1);
    let skipped = &iter.skipped()[0];
    assert_eq!(skipped.index, 1);
    assert_eq!(
        skipped.error.path(),
        Some(tmp.path().join("dir.jpg").as_path())
    );
    assert_eq!(skipped.error.op(), Some(Op::Read));
}
