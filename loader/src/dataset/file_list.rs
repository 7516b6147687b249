//! A dataset listed in a CSV, TSV or JSON Lines file: one row per sample, a path column and a
//! label column, the paths relative to a root.
//!
//! Labels are integers when every row's label is one; otherwise they are class names, mapped to
//! indices as torchvision's `ImageFolder` maps folder names (sorted, `classes`). A first row is a
//! header only when the caller says so or when it holds the columns by their names: never
//! guessed from what its cells look like, so no row is dropped without a word.
//!
//! Parsing is strict and every complaint names the list file and the line. Must not touch the
//! listed files while parsing: a missing image is a read error of that sample, reported (or
//! skipped) by the loader like any other.

use std::borrow::Cow;
use std::collections::BTreeMap;
use std::fmt;
use std::fs;
use std::io;
use std::path::{Path, PathBuf};

use super::{PathList, Source};
use crate::error::{LoaderError, Result};

/// A column of a list: by position (0-based) or by the name a header row gives it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub enum Column {
    /// The n-th field of each row (0-based).
    Index(usize),
    /// The field under this header name (a key, in JSON Lines).
    Name(String),
}

impl fmt::Display for Column {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            Column::Index(i) => write!(f, "column {i}"),
            Column::Name(name) => write!(f, "column {name:?}"),
        }
    }
}

/// The syntax of a list file.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
pub enum ListFormat {
    /// Delimited text, the delimiter given or sniffed (a tab if the first line has one, else a
    /// comma). Default, unless the file name ends in `.jsonl`, `.ndjson` or `.json`.
    #[default]
    Delimited,
    /// One JSON object per line; columns are keys.
    JsonLines,
}

/// How a [`FileList`] is parsed.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct FileListOptions {
    /// Syntax. Default: `None`, JSON Lines for `.jsonl`/`.ndjson`/`.json` files, else delimited.
    pub format: Option<ListFormat>,
    /// Field delimiter of delimited text. Default: `None`, a tab if the first line has one,
    /// else a comma.
    pub delimiter: Option<u8>,
    /// Whether the first row of delimited text is a header. Default: `None`, a header exactly
    /// when it names the columns: every column the caller named (which must then be there),
    /// or, with the default columns, `path` and `label` in some two fields.
    pub has_header: Option<bool>,
    /// The column of the paths. Default: `None`, `"path"` when the first row names it (and
    /// JSON Lines), else field 0.
    pub path_column: Option<Column>,
    /// The column of the labels. Default: `None`, `"label"` when the first row names it (and
    /// JSON Lines), else field 1.
    pub label_column: Option<Column>,
}

impl FileListOptions {
    /// Sets [`Self::format`].
    pub fn format(mut self, format: ListFormat) -> Self {
        self.format = Some(format);
        self
    }

    /// Sets [`Self::delimiter`].
    pub fn delimiter(mut self, delimiter: u8) -> Self {
        self.delimiter = Some(delimiter);
        self
    }

    /// Sets [`Self::has_header`].
    pub fn has_header(mut self, has_header: bool) -> Self {
        self.has_header = Some(has_header);
        self
    }

    /// Sets [`Self::path_column`].
    pub fn path_column(mut self, column: Column) -> Self {
        self.path_column = Some(column);
        self
    }

    /// Sets [`Self::label_column`].
    pub fn label_column(mut self, column: Column) -> Self {
        self.label_column = Some(column);
        self
    }
}

/// The default column names, looked for in a first row.
const PATH: &str = "path";
const LABEL: &str = "label";

/// Files named in a list, with the labels given there, in the list's order.
#[derive(Clone, Debug)]
pub struct FileList {
    list: PathBuf,
    root: PathBuf,
    samples: PathList,
    /// With class-name labels, the names in label order (sorted); empty for integer labels.
    classes: Vec<String>,
}

/// One data row as read: its line, path and label text.
struct Row {
    line: u64,
    path: String,
    label: String,
}

impl FileList {
    /// Reads the list file `list`; its paths are relative to `root` (absolute ones stay as they
    /// are).
    pub fn new(list: impl AsRef<Path>, root: impl AsRef<Path>) -> Result<Self> {
        Self::with_options(list, root, &FileListOptions::default())
    }

    /// [`Self::new`] with explicit parsing options.
    pub fn with_options(
        list: impl AsRef<Path>,
        root: impl AsRef<Path>,
        options: &FileListOptions,
    ) -> Result<Self> {
        let list = list.as_ref();
        let data = fs::read(list).map_err(|source| LoaderError::Io {
            path: list.to_path_buf(),
            source,
        })?;
        Self::from_bytes(&data, list, root, options)
    }

    /// Parses a list already in memory; `list` names it in errors and, without an explicit
    /// format, its ending picks the syntax.
    pub fn from_bytes(
        data: &[u8],
        list: impl AsRef<Path>,
        root: impl AsRef<Path>,
        options: &FileListOptions,
    ) -> Result<Self> {
        let list = list.as_ref().to_path_buf();
        let root = root.as_ref().to_path_buf();
        let fail = |line: u64, reason: String| LoaderError::FileList {
            path: list.clone(),
            line,
            reason,
        };
        let format = options.format.unwrap_or_else(|| format_of(&list));
        let (rows, last_line) = match format {
            ListFormat::Delimited => delimited_rows(data, options, &fail)?,
            ListFormat::JsonLines => json_rows(data, options, &fail)?,
        };
        let Some(first) = rows.first() else {
            return Err(fail(last_line.max(1), "the list has no samples".to_owned()));
        };
        let (labels, classes) = match first.label.parse::<i64>() {
            Ok(_) => (integer_labels(&rows, &fail)?, Vec::new()),
            Err(_) => class_labels(&rows, &fail)?,
        };
        let mut paths = Vec::new();
        paths.try_reserve_exact(rows.len()).map_err(|e| {
            fail(
                last_line,
                format!("{} rows do not fit in memory: {e}", rows.len()),
            )
        })?;
        for row in &rows {
            if row.path.is_empty() {
                return Err(fail(row.line, "empty path".to_owned()));
            }
            paths.push(root.join(&row.path));
        }
        Ok(FileList {
            list,
            root,
            samples: PathList::new(paths, labels)?,
            classes,
        })
    }

    /// The list file.
    pub fn list_path(&self) -> &Path {
        &self.list
    }

    /// The root the paths are relative to.
    pub fn root(&self) -> &Path {
        &self.root
    }

    /// Every sample's path (root joined), in list order.
    pub fn paths(&self) -> &[PathBuf] {
        self.samples.paths()
    }

    /// Every sample's label, in list order.
    pub fn labels(&self) -> &[i64] {
        self.samples.labels()
    }

    /// The samples as a plain list.
    pub fn samples(&self) -> &PathList {
        &self.samples
    }

    /// With class-name labels, the names in label order (sorted by code point, as Python sorts
    /// `str`); empty when the labels were integers.
    pub fn classes(&self) -> &[String] {
        &self.classes
    }
}

impl Source for FileList {
    fn len(&self) -> usize {
        self.samples.len()
    }

    fn read<'a>(&'a self, index: usize, buf: &'a mut Vec<u8>) -> io::Result<&'a [u8]> {
        self.samples.read(index, buf)
    }

    fn label(&self, index: usize) -> i64 {
        self.samples.label(index)
    }

    fn path(&self, index: usize) -> Cow<'_, Path> {
        self.samples.path(index)
    }
}

/// JSON Lines for `.jsonl`, `.ndjson` and `.json` files, delimited text otherwise.
fn format_of(list: &Path) -> ListFormat {
    let ext = list
        .extension()
        .and_then(|e| e.to_str())
        .map(str::to_ascii_lowercase);
    match ext.as_deref() {
        Some("jsonl" | "ndjson" | "json") => ListFormat::JsonLines,
        _ => ListFormat::Delimited,
    }
}

/// Every row's label as an integer; a class name among integers is an error (a typo is likelier
/// than a mix).
fn integer_labels(rows: &[Row], fail: &impl Fn(u64, String) -> LoaderError) -> Result<Vec<i64>> {
    rows.iter()
        .map(|row| {
            row.label.parse::<i64>().map_err(|_| {
                fail(
                    row.line,
                    format!(
                        "label {:?} is not an integer, but line {}'s is: labels are all \
                         integers or all class names",
                        row.label, rows[0].line
                    ),
                )
            })
        })
        .collect()
}

/// Class-name labels: the sorted distinct names and each row's index among them. An integer
/// among names is an error, as in [`integer_labels`].
fn class_labels(
    rows: &[Row],
    fail: &impl Fn(u64, String) -> LoaderError,
) -> Result<(Vec<i64>, Vec<String>)> {
    let mut index: BTreeMap<&str, i64> = BTreeMap::new();
    for row in rows {
        if row.label.parse::<i64>().is_ok() {
            return Err(fail(
                row.line,
                format!(
                    "label {:?} is an integer, but line {}'s ({:?}) is a class name: labels are \
                     all integers or all class names",
                    row.label, rows[0].line, rows[0].label
                ),
            ));
        }
        if row.label.is_empty() {
            return Err(fail(row.line, "empty label".to_owned()));
        }
        index.insert(&row.label, 0);
    }
    // `str` order is code-point order, which is Python's `sorted` of the names.
    for (i, value) in index.values_mut().enumerate() {
        *value = i as i64;
    }
    let labels = rows.iter().map(|row| index[row.label.as_str()]).collect();
    let classes = index.into_keys().map(str::to_owned).collect();
    Ok((labels, classes))
}

/// The data rows of delimited text, and the last line read.
fn delimited_rows(
    data: &[u8],
    options: &FileListOptions,
    fail: &impl Fn(u64, String) -> LoaderError,
) -> Result<(Vec<Row>, u64)> {
    let delimiter = options.delimiter.unwrap_or_else(|| sniff_delimiter(data));
    let mut reader = csv::ReaderBuilder::new()
        .delimiter(delimiter)
        .has_headers(false)
        .flexible(true)
        .trim(csv::Trim::All)
        .from_reader(data);
    let mut record = csv::StringRecord::new();
    let mut rows = Vec::new();
    let mut columns: Option<(usize, usize)> = None;
    let mut last_line = 0;
    loop {
        match reader.read_record(&mut record) {
            Ok(true) => {}
            Ok(false) => break,
            Err(e) => {
                let line = e.position().map_or(last_line + 1, csv::Position::line);
                return Err(fail(line, e.to_string()));
            }
        }
        let line = record.position().map_or(last_line + 1, csv::Position::line);
        last_line = line;
        if record.iter().all(str::is_empty) {
            continue;
        }
        let (path_at, label_at) = match columns {
            Some(c) => c,
            None => {
                let (c, header) = resolve_columns(&record, options, line, fail)?;
                columns = Some(c);
                if header {
                    continue;
                }
                c
            }
        };
        let field = |at: usize| {
            record.get(at).ok_or_else(|| {
                fail(
                    line,
                    format!(
                        "expected at least {} fields, found {} in {:?}",
                        path_at.max(label_at) + 1,
                        record.len(),
                        record.iter().collect::<Vec<_>>()
                    ),
                )
            })
        };
        rows.push(Row {
            line,
            path: field(path_at)?.to_owned(),
            label: field(label_at)?.to_owned(),
        });
    }
    Ok((rows, last_line))
}

/// The positions of the path and label columns, and whether `first` (the first non-empty row)
/// is a header: when the caller says so, or when it names the columns (every column the caller
/// named, which must then be there; or, with the default columns, `path` and `label` both).
fn resolve_columns(
    first: &csv::StringRecord,
    options: &FileListOptions,
    line: u64,
    fail: &impl Fn(u64, String) -> LoaderError,
) -> Result<((usize, usize), bool)> {
    let find = |name: &str| first.iter().position(|cell| cell == name);
    let columns = [&options.path_column, &options.label_column];
    let caller_named = columns.iter().any(|c| matches!(c, Some(Column::Name(_))));
    if options.has_header == Some(false) && caller_named {
        return Err(fail(
            line,
            "columns are named, but has_header is false: there is no header to find them in"
                .to_owned(),
        ));
    }
    if caller_named {
        let locate = |column: &Option<Column>, default: usize| -> Result<usize> {
            match column {
                Some(Column::Index(i)) => Ok(*i),
                None => Ok(default),
                Some(Column::Name(name)) => find(name).ok_or_else(|| {
                    fail(
                        line,
                        format!(
                            "column {name:?} is not in the first row {:?}",
                            first.iter().collect::<Vec<_>>()
                        ),
                    )
                }),
            }
        };
        let positions = (
            locate(&options.path_column, 0)?,
            locate(&options.label_column, 1)?,
        );
        return Ok((positions, true));
    }
    let defaults = columns.iter().all(|c| c.is_none());
    if defaults && options.has_header != Some(false) {
        if let (Some(path), Some(label)) = (find(PATH), find(LABEL)) {
            return Ok(((path, label), true));
        }
    }
    let index = |column: &Option<Column>, default: usize| match column {
        Some(Column::Index(i)) => *i,
        _ => default,
    };
    let positions = (
        index(&options.path_column, 0),
        index(&options.label_column, 1),
    );
    Ok((positions, options.has_header == Some(true)))
}

/// The data rows of JSON Lines (one object per line, columns as keys; labels as numbers or
/// strings), and the last line read.
fn json_rows(
    data: &[u8],
    options: &FileListOptions,
    fail: &impl Fn(u64, String) -> LoaderError,
) -> Result<(Vec<Row>, u64)> {
    let key = |column: &Option<Column>, default: &str| match column {
        None => Ok(default.to_owned()),
        Some(Column::Name(n)) => Ok(n.clone()),
        Some(Column::Index(i)) => Err(fail(
            0,
            format!("JSON Lines columns are keys, not positions (got index {i})"),
        )),
    };
    let path_key = key(&options.path_column, PATH)?;
    let label_key = key(&options.label_column, LABEL)?;
    let mut rows = Vec::new();
    let mut last_line = 0;
    for (i, text) in data.split(|&b| b == b'\n').enumerate() {
        let line = i as u64 + 1;
        last_line = line;
        if text.iter().all(u8::is_ascii_whitespace) {
            continue;
        }
        let value: serde_json::Value =
            serde_json::from_slice(text).map_err(|e| fail(line, format!("not JSON: {e}")))?;
        let serde_json::Value::Object(object) = value else {
            return Err(fail(line, "expected a JSON object".to_owned()));
        };
        let cell = |name: &str| -> Result<String> {
            match object.get(name) {
                Some(serde_json::Value::String(s)) => Ok(s.trim().to_owned()),
                Some(serde_json::Value::Number(n)) if n.is_i64() => Ok(n.to_string()),
                Some(other) => Err(fail(
                    line,
                    format!("key {name:?} holds {other}, not a string or an integer"),
                )),
                None => Err(fail(line, format!("no key {name:?}"))),
            }
        };
        rows.push(Row {
            line,
            path: cell(&path_key)?,
            label: cell(&label_key)?,
        });
    }
    Ok((rows, last_line))
}

/// A tab when the first non-empty line has one, else a comma.
fn sniff_delimiter(data: &[u8]) -> u8 {
    let first = data
        .split(|&b| b == b'\n')
        .find(|line| line.iter().any(|b| !b.is_ascii_whitespace()))
        .unwrap_or(&[]);
    if first.contains(&b'\t') {
        b'\t'
    } else {
        b','
    }
}
