//! One file, downloaded resumably: bytes go to `<final>.incomplete`, a dropped connection resumes with a Range
//! request, and only a file of exactly the expected size is renamed to its final name. A server that sends more
//! than it announced, or keeps sending less, is refused; the partial file is never mistaken for a complete one.

use crate::http::{Client, Subject};
use crate::HubError;
use std::io::{Read, Write};
use std::path::{Path, PathBuf};

/// What a download reports as it goes. Every method has a silent default.
pub trait Progress {
    /// The plan, before downloading: each file with its size (when known) and whether it is already here.
    fn plan(&mut self, _title: &str, _files: &[PlannedFile]) {}
    /// A file starts (after `resumed_from` bytes already on disk).
    fn start(&mut self, _file: &str, _size: Option<u64>, _resumed_from: u64) {}
    /// Bytes arrived.
    fn advance(&mut self, _bytes: u64) {}
    /// The file is complete.
    fn finish(&mut self, _file: &str) {}
    /// A line for the user.
    fn note(&mut self, _line: &str) {}
}

/// A file in a download plan.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlannedFile {
    /// Its name in the repo.
    pub name: String,
    /// Bytes, when the server said.
    pub size: Option<u64>,
    /// Already complete on this machine.
    pub cached: bool,
}

/// Reports nothing.
pub struct Silent;
impl Progress for Silent {}

/// Times a dropped connection is resumed within one call before giving up (the partial file stays for the next).
pub const RESUME_ATTEMPTS: usize = 4;

fn io(path: &Path) -> impl FnOnce(std::io::Error) -> HubError + '_ {
    move |source| HubError::Io { path: path.display().to_string(), source }
}

/// `<path>.incomplete`.
pub fn incomplete_path(path: &Path) -> PathBuf {
    let mut s = path.as_os_str().to_owned();
    s.push(".incomplete");
    PathBuf::from(s)
}

/// Where one download comes from and goes to.
pub struct Target<'a> {
    /// The URL.
    pub url: &'a str,
    /// For error messages and the token advice.
    pub subject: Subject<'a>,
    /// The file's name, for progress and messages.
    pub name: &'a str,
    /// The final path (written as `<path>.incomplete` first).
    pub path: &'a Path,
    /// The size the index or manifest announced, when it did.
    pub expected: Option<u64>,
    /// The most bytes accepted when nothing announced a size.
    pub limit: u64,
}

fn parse_content_range_start(v: &str) -> Option<u64> {
    v.strip_prefix("bytes ")?.split('-').next()?.trim().parse().ok()
}

/// Downloads `t.url` to `t.path`, resuming a previous partial download. Returns the bytes transferred.
pub fn fetch(client: &Client, t: &Target<'_>, progress: &mut dyn Progress) -> Result<u64, HubError> {
    if let Some(exp) = t.expected {
        if exp > t.limit {
            return Err(HubError::Invalid {
                field: format!("size of {}", t.name),
                value: exp.to_string(),
                why: format!("larger than the {} bytes kvad accepts for this file; nothing was downloaded", t.limit),
            });
        }
    }
    let part = incomplete_path(t.path);
    if let Some(parent) = t.path.parent() {
        std::fs::create_dir_all(parent).map_err(io(parent))?;
    }
    let cap = t.expected.unwrap_or(t.limit);
    let mut transferred = 0u64;
    let mut failures = 0usize;
    let mut last_error = String::new();
    let mut started = false;
    loop {
        let mut have = std::fs::metadata(&part).map(|m| m.len()).unwrap_or(0);
        if have > cap {
            std::fs::remove_file(&part).map_err(io(&part))?;
            have = 0;
        }
        if t.expected == Some(have) && have > 0 {
            break;
        }
        if failures >= RESUME_ATTEMPTS {
            return Err(HubError::Interrupted {
                file: t.name.into(),
                have,
                expected: t.expected,
                detail: last_error,
                partial: part.display().to_string(),
            });
        }
        let resp = match client.get(t.url, Some(have), &[], t.subject) {
            Ok(r) => r,
            Err(HubError::Unreachable { detail, .. }) if started => {
                failures += 1;
                last_error = detail;
                continue;
            }
            Err(e) => return Err(e),
        };
        let announced = resp.header("content-length").and_then(|v| v.parse::<u64>().ok());
        let resumes = resp.status == 206
            && resp.header("content-range").and_then(|v| parse_content_range_start(&v)) == Some(have);
        if resp.status == 416 {
            // The server has nothing past `have`: what is here is all it has, and it did not match the size.
            std::fs::remove_file(&part).map_err(io(&part))?;
            failures += 1;
            last_error = format!("the server refused the range from byte {have}");
            continue;
        }
        let offset = if resumes { have } else { 0 };
        let mut file = std::fs::OpenOptions::new()
            .create(true)
            .write(true)
            .append(resumes)
            .truncate(!resumes)
            .open(&part)
            .map_err(io(&part))?;
        if !started {
            progress.start(t.name, t.expected.or(announced.map(|a| a + offset)), offset);
            started = true;
        }
        let total_announced = announced.map(|a| a + offset);
        if let (Some(exp), Some(a)) = (t.expected, total_announced) {
            if a > exp {
                drop(file);
                std::fs::remove_file(&part).map_err(io(&part))?;
                return Err(HubError::Invalid {
                    field: format!("Content-Length of {}", t.name),
                    value: a.to_string(),
                    why: format!("the listing says {exp} bytes; refused, nothing kept"),
                });
            }
        }
        let mut reader = resp.into_reader();
        let mut pos = offset;
        let mut buf = vec![0u8; 1 << 16];
        let outcome: Result<(), String> = loop {
            match reader.read(&mut buf) {
                Ok(0) => break Ok(()),
                Ok(n) => {
                    if pos + n as u64 > cap {
                        drop(file);
                        std::fs::remove_file(&part).map_err(io(&part))?;
                        return Err(HubError::Invalid {
                            field: format!("size of {}", t.name),
                            value: format!("more than {cap} bytes"),
                            why: match t.expected {
                                Some(_) => {
                                    "the server sent more than the listing announced; refused, nothing kept".into()
                                }
                                None => "larger than kvad accepts for this file; refused, nothing kept".into(),
                            },
                        });
                    }
                    file.write_all(&buf[..n]).map_err(io(&part))?;
                    pos += n as u64;
                    transferred += n as u64;
                    progress.advance(n as u64);
                }
                Err(e) if e.kind() == std::io::ErrorKind::Interrupted => continue,
                Err(e) => break Err(e.to_string()),
            }
        };
        file.flush().map_err(io(&part))?;
        drop(file);
        let want = t.expected.or(total_announced);
        match (outcome, want) {
            (Ok(()), Some(w)) if pos == w => break,
            (Ok(()), None) => break,
            (Ok(()), Some(w)) => {
                failures += 1;
                last_error = format!("the connection ended at byte {pos} of {w}");
            }
            (Err(e), _) => {
                failures += 1;
                last_error = format!("the connection dropped at byte {pos}: {e}");
            }
        }
    }
    std::fs::rename(&part, t.path).map_err(io(t.path))?;
    progress.finish(t.name);
    Ok(transferred)
}
