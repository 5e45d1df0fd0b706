//! Reading a parsed TOML file table by table, keeping each key's line: every value
//! is taken by name, typed, and checked; what no one asked for is an unknown key.

use std::ops::{Range, RangeInclusive};
use std::path::{Path, PathBuf};
use std::time::Duration;

use toml::de::{DeTable, DeValue};

use super::ConfigError;

/// A file's text and path, to turn spans into lines and relative paths into
/// paths from the file's directory.
pub(super) struct Source<'a> {
    pub path: &'a Path,
    pub text: &'a str,
}

impl Source<'_> {
    pub fn line(&self, span: Range<usize>) -> usize {
        self.text.get(..span.start).map_or(1, |s| s.matches('\n').count() + 1)
    }

    /// `p` as written when absolute, else from the file's directory.
    pub fn resolve(&self, p: &str) -> PathBuf {
        let p = Path::new(p);
        if p.is_absolute() {
            return p.to_path_buf();
        }
        self.path.parent().unwrap_or(Path::new("")).join(p)
    }

    pub fn error(&self, line: usize, key: impl Into<String>, message: impl Into<String>) -> ConfigError {
        ConfigError::Invalid { path: self.path.to_path_buf(), line, key: key.into(), message: message.into() }
    }
}

/// One table, with the keys asked for so far.
pub(super) struct Table<'a> {
    pub src: &'a Source<'a>,
    /// Its dotted name (`job.home`), empty for the file's top level.
    pub name: String,
    /// The line it starts at.
    pub line: usize,
    entries: &'a DeTable<'a>,
    asked: Vec<&'static str>,
}

impl<'a> Table<'a> {
    pub fn root(src: &'a Source<'a>, entries: &'a DeTable<'a>) -> Table<'a> {
        Table { src, name: String::new(), line: 1, entries, asked: Vec::new() }
    }

    fn key_path(&self, key: &str) -> String {
        if self.name.is_empty() { key.to_string() } else { format!("{}.{key}", self.name) }
    }

    /// The value of `key`, if given.
    pub fn get(&mut self, key: &'static str) -> Option<Item<'a>> {
        self.asked.push(key);
        let (k, v) = self.entries.get_key_value(key)?;
        Some(Item { src: self.src, key: self.key_path(key), line: self.src.line(k.span()), value: v.get_ref() })
    }

    /// The value of `key`, which must be given.
    pub fn require(&mut self, key: &'static str, what: &str) -> Result<Item<'a>, ConfigError> {
        self.get(key).ok_or_else(|| self.error(format!("{key} is missing: {what}")))
    }

    /// An error about the table itself, at its first line.
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        self.src.error(self.line, self.name.clone(), message)
    }

    /// Every entry, in the order of the file, each as an item (for tables of named
    /// things: `[job.NAME]`, `[notify.NAME]`, `[storage]`).
    pub fn entries(&mut self) -> Vec<(String, Item<'a>)> {
        let mut all: Vec<_> = self.entries.iter().collect();
        all.sort_by_key(|(k, _)| k.span().start);
        all.into_iter()
            .map(|(k, v)| {
                let name = k.get_ref().to_string();
                let item = Item {
                    src: self.src,
                    key: self.key_path(&name),
                    line: self.src.line(k.span()),
                    value: v.get_ref(),
                };
                (name, item)
            })
            .collect()
    }

    /// Refuses a key not in `keys`, before any value is read: a misspelt key is
    /// named, rather than the key it then seems to miss.
    pub fn known(&self, keys: &[&'static str]) -> Result<(), ConfigError> {
        self.refuse_unknown(keys)
    }

    /// Refuses the keys no one asked for.
    pub fn finish(self) -> Result<(), ConfigError> {
        self.refuse_unknown(&self.asked)
    }

    /// The first key of the file not in `known` is an error.
    fn refuse_unknown(&self, known: &[&'static str]) -> Result<(), ConfigError> {
        let mut unknown: Vec<_> = self.entries.keys().filter(|k| !known.contains(&k.get_ref().as_ref())).collect();
        unknown.sort_by_key(|k| k.span().start);
        let Some(k) = unknown.first() else { return Ok(()) };
        let key: &str = k.get_ref();
        let mut names = known.to_vec();
        names.sort_unstable();
        names.dedup();
        let hint = match names.iter().find(|c| close(key, c)) {
            Some(c) => format!("did you mean {c:?}?"),
            None if names.is_empty() => "this table takes no keys".to_string(),
            None => format!("the keys here are {}", names.join(", ")),
        };
        Err(self.src.error(self.src.line(k.span()), self.key_path(key), format!("unknown key; {hint}")))
    }
}

/// Whether `a` is a likely misspelling of `b`: at most two edits apart.
fn close(a: &str, b: &str) -> bool {
    let (a, b): (Vec<char>, Vec<char>) = (a.chars().collect(), b.chars().collect());
    if a.len().abs_diff(b.len()) > 2 {
        return false;
    }
    let mut prev: Vec<usize> = (0..=b.len()).collect();
    for (i, ca) in a.iter().enumerate() {
        let mut cur = vec![i + 1];
        for (j, cb) in b.iter().enumerate() {
            let sub = prev[j] + usize::from(ca != cb);
            cur.push(sub.min(prev[j + 1] + 1).min(cur[j] + 1));
        }
        prev = cur;
    }
    prev[b.len()] <= 2
}

/// One value, with its dotted key and line.
pub(super) struct Item<'a> {
    pub src: &'a Source<'a>,
    /// The dotted key (`job.home.schedule`).
    pub key: String,
    pub line: usize,
    value: &'a DeValue<'a>,
}

impl<'a> Item<'a> {
    pub fn error(&self, message: impl Into<String>) -> ConfigError {
        self.src.error(self.line, self.key.clone(), message)
    }

    fn wrong_type(&self, expected: &str) -> ConfigError {
        self.error(format!("expected {expected}, found {}", article(self.value.type_str())))
    }

    pub fn str(&self) -> Result<&'a str, ConfigError> {
        self.value.as_str().ok_or_else(|| self.wrong_type("a string"))
    }

    /// A string that is not empty.
    pub fn text(&self) -> Result<String, ConfigError> {
        let s = self.str()?;
        if s.trim().is_empty() {
            return Err(self.error("it is empty: give a value, or leave the key out"));
        }
        Ok(s.to_string())
    }

    /// A string, or an array of strings (none empty).
    pub fn texts(&self) -> Result<Vec<String>, ConfigError> {
        let values: Vec<&DeValue> = match self.value {
            DeValue::String(_) => vec![self.value],
            DeValue::Array(a) => a.iter().map(|v| v.get_ref()).collect(),
            _ => return Err(self.wrong_type("a string or an array of strings")),
        };
        values
            .into_iter()
            .map(|v| match v.as_str() {
                Some(s) if !s.trim().is_empty() => Ok(s.to_string()),
                Some(_) => Err(self.error("an empty string in the list: remove it")),
                None => Err(self.error(format!("expected strings, found {} in the list", article(v.type_str())))),
            })
            .collect()
    }

    pub fn bool(&self) -> Result<bool, ConfigError> {
        self.value.as_bool().ok_or_else(|| self.wrong_type("true or false"))
    }

    /// The value if it is true or false, else None.
    pub fn as_bool(&self) -> Option<bool> {
        self.value.as_bool()
    }

    pub fn int(&self, range: RangeInclusive<i64>) -> Result<i64, ConfigError> {
        let expected = format!("an integer from {} to {}", range.start(), range.end());
        let i = self.value.as_integer().ok_or_else(|| self.wrong_type(&expected))?;
        let n = i64::from_str_radix(i.as_str(), i.radix()).ok().filter(|n| range.contains(n));
        n.ok_or_else(|| self.error(format!("{}: give {expected}", i.as_str())))
    }

    /// A duration such as `90s`, `15m`, `36h` or `1d`.
    pub fn duration(&self) -> Result<Duration, ConfigError> {
        let s = self.str().map_err(|_| self.wrong_type("a duration such as \"90s\", \"15m\", \"36h\" or \"1d\""))?;
        humantime::parse_duration(s.trim()).map_err(|e| {
            self.error(format!("{s:?} is not a duration: {e}; write one such as \"90s\", \"15m\", \"36h\" or \"1d\""))
        })
    }

    /// A duration longer than zero.
    pub fn positive_duration(&self) -> Result<Duration, ConfigError> {
        let d = self.duration()?;
        if d.is_zero() {
            return Err(self.error("it must be longer than zero"));
        }
        Ok(d)
    }

    /// A file's path, from the file's directory when relative.
    pub fn path(&self) -> Result<PathBuf, ConfigError> {
        Ok(self.src.resolve(&self.text()?))
    }

    /// A path, or an array of them.
    pub fn paths(&self) -> Result<Vec<PathBuf>, ConfigError> {
        Ok(self.texts()?.iter().map(|p| self.src.resolve(p)).collect())
    }

    pub fn table(&self) -> Result<Table<'a>, ConfigError> {
        match self.value {
            DeValue::Table(t) => {
                Ok(Table { src: self.src, name: self.key.clone(), line: self.line, entries: t, asked: Vec::new() })
            }
            _ => Err(self.wrong_type("a table")),
        }
    }

    pub fn is_table(&self) -> bool {
        self.value.is_table()
    }
}

fn article(type_name: &str) -> String {
    match type_name {
        "integer" | "array" => format!("an {type_name}"),
        "boolean" => "a boolean".to_string(),
        other => format!("a {other}"),
    }
}
