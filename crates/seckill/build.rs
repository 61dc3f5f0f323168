//! The book (`docs/src`) built into the binary, so that the instance serves it under `/book/`
//! offline, beside the teaching page that links to its lesson plan: every page's Markdown
//! and every image, listed in `$OUT_DIR/book.rs`.

use std::fmt::Write as _;
use std::path::{Path, PathBuf};

fn main() {
    let manifest = PathBuf::from(std::env::var_os("CARGO_MANIFEST_DIR").expect("set by cargo"));
    let book = manifest.join("../../docs/src");
    println!("cargo:rerun-if-changed={}", book.display());
    println!("cargo:rerun-if-changed={}", book.join("images").display());

    let mut out = String::new();
    out.push_str("/// The book's pages: name (the file without `.md`), Markdown.\n");
    out.push_str("pub static PAGES: &[(&str, &str)] = &[\n");
    for path in files(&book, &["md"]) {
        let name = path
            .file_stem()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name");
        writeln!(
            out,
            "    ({name:?}, include_str!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    out.push_str("];\n\n/// The book's images: file name, bytes.\n");
    out.push_str("pub static IMAGES: &[(&str, &[u8])] = &[\n");
    for path in files(&book.join("images"), &["svg", "png"]) {
        let name = path
            .file_name()
            .and_then(|s| s.to_str())
            .expect("a UTF-8 name");
        writeln!(
            out,
            "    ({name:?}, include_bytes!({:?})),",
            path.display().to_string()
        )
        .expect("writing to a String");
    }
    out.push_str("];\n");
    let target = PathBuf::from(std::env::var_os("OUT_DIR").expect("set by cargo")).join("book.rs");
    std::fs::write(target, out).expect("OUT_DIR is writable");
}

/// The files of `dir` with one of `extensions`, sorted; none when `dir` is missing (a
/// build from the crate alone serves an empty book).
fn files(dir: &Path, extensions: &[&str]) -> Vec<PathBuf> {
    let Ok(entries) = std::fs::read_dir(dir) else {
        return Vec::new();
    };
    let mut files: Vec<PathBuf> = entries
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| {
            path.is_file()
                && path
                    .extension()
                    .and_then(|e| e.to_str())
                    .is_some_and(|e| extensions.contains(&e))
        })
        .map(|path| path.canonicalize().unwrap_or(path))
        .collect();
    files.sort();
    files
}
