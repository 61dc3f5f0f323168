//! `GET /book/`: the project's book (`docs/src`), built into the binary and served as HTML,
//! offline, so that the teaching page can link to its lesson plan in the reader's language
//! (`/book/teaching`, `/book/teaching.zh-CN`). `GET /book/images/{file}`: its pictures.
//!
//! Only the pages and images `build.rs` listed are served: a name from the path is looked
//! up in that list, never joined to a filesystem path.

use axum::Router;
use axum::extract::Path;
use axum::http::StatusCode;
use axum::http::header::{CACHE_CONTROL, CONTENT_TYPE};
use axum::response::{IntoResponse, Redirect, Response};
use axum::routing::get;
use pulldown_cmark::{CowStr, Event, Options, Parser, Tag, TagEnd, html};

use crate::state::AppState;

mod built {
    include!(concat!(env!("OUT_DIR"), "/book.rs"));
}

pub fn router() -> Router<AppState> {
    Router::new()
        .route("/book", get(|| async { Redirect::permanent("/book/") }))
        .route("/book/", get(|| async { page("SUMMARY") }))
        .route("/book/images/{file}", get(image))
        .route(
            "/book/{page}",
            get(|Path(name): Path<String>| async move { page(&name) }),
        )
}

/// One page, by name (`teaching`, `teaching.zh-CN`; `.md` or `.html` after it is allowed).
fn page(name: &str) -> Response {
    let name = name
        .strip_suffix(".md")
        .or_else(|| name.strip_suffix(".html"))
        .unwrap_or(name);
    let Some((_, markdown)) = built::PAGES.iter().find(|(page, _)| *page == name) else {
        return (StatusCode::NOT_FOUND, "no such page in the book\n").into_response();
    };
    (
        [
            (CONTENT_TYPE, "text/html; charset=utf-8"),
            (CACHE_CONTROL, "no-cache"),
        ],
        render(name, markdown),
    )
        .into_response()
}

async fn image(Path(file): Path<String>) -> Response {
    let Some((_, bytes)) = built::IMAGES.iter().find(|(image, _)| *image == file) else {
        return StatusCode::NOT_FOUND.into_response();
    };
    let content_type = if file.ends_with(".svg") {
        "image/svg+xml"
    } else {
        "image/png"
    };
    ([(CONTENT_TYPE, content_type)], *bytes).into_response()
}

/// A page's Markdown as an HTML document: headings with the ids the book's anchors name,
/// links to other pages and to images pointed under `/book/`.
pub fn render(name: &str, markdown: &str) -> String {
    let options = Options::ENABLE_TABLES
        | Options::ENABLE_STRIKETHROUGH
        | Options::ENABLE_FOOTNOTES
        | Options::ENABLE_TASKLISTS;
    let mut events: Vec<Event> = Parser::new_ext(markdown, options).collect();
    name_headings(&mut events);
    let events = events.into_iter().map(|event| match event {
        Event::Start(Tag::Link {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Link {
            link_type,
            dest_url: within_book(dest_url),
            title,
            id,
        }),
        Event::Start(Tag::Image {
            link_type,
            dest_url,
            title,
            id,
        }) => Event::Start(Tag::Image {
            link_type,
            dest_url: within_book(dest_url),
            title,
            id,
        }),
        other => other,
    });
    let mut body = String::with_capacity(markdown.len() * 3 / 2);
    html::push_html(&mut body, events);
    let lang = if name.ends_with(".zh-CN") {
        "zh-CN"
    } else {
        "en"
    };
    let title = markdown
        .lines()
        .find_map(|line| line.strip_prefix("# "))
        .unwrap_or(name);
    format!(
        "<!doctype html>\n<html lang=\"{lang}\">\n<head>\n<meta charset=\"utf-8\">\n\
         <meta name=\"viewport\" content=\"width=device-width, initial-scale=1\">\n\
         <title>{title}</title>\n<style>{STYLE}</style>\n</head>\n<body>\n\
         <nav><a href=\"/\">seckill</a> · <a href=\"/book/\">book</a></nav>\n<main>\n{body}</main>\n</body>\n</html>\n",
        title = escape(title),
    )
}

/// Where a link in a page goes once served: another page `x.md#a` → `/book/x#a`, an image
/// `images/y.svg` → `/book/images/y.svg`; anything with a scheme, an anchor in the page
/// or an absolute path stays.
fn within_book(dest: CowStr<'_>) -> CowStr<'_> {
    let url = dest.as_ref();
    if url.starts_with('#')
        || url.starts_with('/')
        || url.contains("://")
        || url.starts_with("mailto:")
    {
        return dest;
    }
    let (path, anchor) = url
        .split_once('#')
        .map_or((url, None), |(p, a)| (p, Some(a)));
    let path = path.strip_prefix("./").unwrap_or(path);
    let served = match path.strip_suffix(".md") {
        Some(page) => format!("/book/{page}"),
        None => format!("/book/{path}"),
    };
    match anchor {
        Some(anchor) => format!("{served}#{anchor}").into(),
        None => served.into(),
    }
}

/// Gives every heading the id the book's links use: its text, lower-cased, spaces as
/// dashes, other punctuation dropped (`-1`, `-2` … after a repeat), as mdBook and
/// `scripts/book-links.py` make them.
fn name_headings(events: &mut [Event<'_>]) {
    let mut seen = std::collections::HashMap::<String, usize>::new();
    let mut i = 0;
    while i < events.len() {
        if let Event::Start(Tag::Heading { .. }) = events[i] {
            let mut text = String::new();
            let mut j = i + 1;
            while j < events.len() && !matches!(events[j], Event::End(TagEnd::Heading(_))) {
                if let Event::Text(t) | Event::Code(t) = &events[j] {
                    text.push_str(t);
                }
                j += 1;
            }
            let base = slug(&text);
            let n = seen.entry(base.clone()).or_insert(0);
            let id = if *n == 0 { base } else { format!("{base}-{n}") };
            *n += 1;
            if let Event::Start(Tag::Heading { id: slot, .. }) = &mut events[i] {
                *slot = Some(id.into());
            }
            i = j;
        }
        i += 1;
    }
}

fn slug(text: &str) -> String {
    text.trim()
        .to_lowercase()
        .chars()
        .filter_map(|c| {
            if c.is_alphanumeric() || c == '_' || c == '-' {
                Some(c)
            } else if c.is_whitespace() {
                Some('-')
            } else {
                None
            }
        })
        .collect()
}

fn escape(text: &str) -> String {
    text.replace('&', "&amp;")
        .replace('<', "&lt;")
        .replace('>', "&gt;")
        .replace('"', "&quot;")
}

/// Enough style to read a chapter on a projector: a measure, a larger type, tables ruled.
const STYLE: &str = "body{font:18px/1.6 system-ui,-apple-system,'Segoe UI','PingFang SC','Microsoft YaHei',sans-serif;margin:0;color:#1d1d1f}\
nav{padding:.6em 1.2em;border-bottom:1px solid #ddd;font-size:15px}\
main{max-width:52em;margin:0 auto;padding:1em 1.2em 4em}\
pre{background:#f5f5f7;padding:.8em;overflow-x:auto;font-size:15px}\
code{font-family:ui-monospace,Menlo,Consolas,monospace;font-size:.9em}\
table{border-collapse:collapse;margin:1em 0;font-size:16px}\
th,td{border:1px solid #ccc;padding:.3em .6em;vertical-align:top}\
img{max-width:100%}";

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn links_stay_in_the_book_and_headings_get_their_anchors() {
        let html = render(
            "x",
            "# Title\n\n## A `code` heading, again!\n\n## A `code` heading, again!\n\n\
             [plan](teaching.md#lesson-1) [anchor](#title) ![pic](images/t.svg) \
             [web](https://example.com/a.md)\n",
        );
        assert!(html.contains("<h2 id=\"a-code-heading-again\">"), "{html}");
        assert!(
            html.contains("<h2 id=\"a-code-heading-again-1\">"),
            "{html}"
        );
        assert!(html.contains("href=\"/book/teaching#lesson-1\""), "{html}");
        assert!(html.contains("href=\"#title\""), "{html}");
        assert!(html.contains("src=\"/book/images/t.svg\""), "{html}");
        assert!(html.contains("href=\"https://example.com/a.md\""), "{html}");
    }

    #[test]
    fn the_lesson_plan_is_in_the_book_in_both_languages() {
        for name in [
            "teaching",
            "teaching.zh-CN",
            "handouts",
            "handouts.zh-CN",
            "SUMMARY",
        ] {
            assert!(
                built::PAGES.iter().any(|(page, _)| *page == name),
                "{name} is not built into the binary"
            );
        }
    }

    /// Every link and image in every page, as served, lands on a page or image of the
    /// book, and every anchor on an id of its page.
    #[test]
    fn every_link_in_the_served_book_resolves() {
        let rendered: Vec<(&str, String)> = built::PAGES
            .iter()
            .map(|(name, markdown)| (*name, render(name, markdown)))
            .collect();
        let ids = |html: &str| -> Vec<String> {
            html.split(" id=\"")
                .skip(1)
                .filter_map(|rest| rest.split('"').next().map(str::to_owned))
                .collect()
        };
        let mut broken = Vec::new();
        for (name, html) in &rendered {
            for attr in ["href=\"", "src=\""] {
                for rest in html.split(attr).skip(1) {
                    let url = rest.split('"').next().unwrap_or("");
                    let Some(path) = url.strip_prefix("/book/") else {
                        if let Some(anchor) = url.strip_prefix('#')
                            && !ids(html).iter().any(|id| id == anchor)
                        {
                            broken.push(format!("{name}: {url}"));
                        }
                        continue;
                    };
                    let (path, anchor) = path
                        .split_once('#')
                        .map_or((path, None), |(p, a)| (p, Some(a)));
                    let found = if let Some(image) = path.strip_prefix("images/") {
                        built::IMAGES.iter().any(|(file, _)| *file == image)
                    } else {
                        let page = if path.is_empty() { "SUMMARY" } else { path };
                        rendered.iter().any(|(other, target)| {
                            *other == page
                                && anchor.is_none_or(|a| ids(target).iter().any(|id| id == a))
                        })
                    };
                    if !found {
                        broken.push(format!("{name}: {url}"));
                    }
                }
            }
        }
        assert!(broken.is_empty(), "links that go nowhere: {broken:#?}");
        assert!(rendered.len() > 20, "the whole book is built in");
    }
}
