//! Token pricing (spec §4, §9), as `turnkeeper/core/pricing.py` pins it; its constants are
//! `conventions::Prices`.

const MARKER_OPEN: &str = "[IMAGE:";
const LOADABLE_PREFIXES: [&str; 5] = ["/", "http://", "https://", "data:", "\\\\"];

/// Unicode White_Space, the set `pricing.WHITESPACE` spells out.
pub fn is_white_space(c: char) -> bool {
    matches!(
        c,
        '\t' | '\n'
            | '\u{0b}'
            | '\u{0c}'
            | '\r'
            | ' '
            | '\u{85}'
            | '\u{a0}'
            | '\u{1680}'
            | '\u{2000}'
            ..='\u{200a}' | '\u{2028}' | '\u{2029}' | '\u{202f}' | '\u{205f}' | '\u{3000}'
    )
}

fn strip(text: &str) -> &str {
    text.trim_matches(is_white_space)
}

/// ceil(bytes / 4), without floats.
pub fn text_tokens(text_bytes: u64) -> u64 {
    text_bytes.div_ceil(4)
}

fn is_loadable_ref(reference: &str) -> bool {
    let reference = strip(reference);
    if LOADABLE_PREFIXES.iter().any(|p| reference.starts_with(p)) {
        return true;
    }
    // A drive letter: `C:\` or `C:/`.
    let b = reference.as_bytes();
    b.len() >= 3 && b[0].is_ascii_alphabetic() && b[1] == b':' && (b[2] == b'\\' || b[2] == b'/')
}

/// A real user row's priced text: loadable `[IMAGE:...]` markers removed, then trimmed of
/// White_Space. Returns (UTF-8 bytes of what is left, images removed).
pub fn strip_sent_images(content: &str) -> (u64, u32) {
    if !content.contains(MARKER_OPEN) {
        return (strip(content).len() as u64, 0);
    }
    let mut kept = String::with_capacity(content.len());
    let mut images = 0;
    let mut pos = 0;
    let mut search = 0;
    while let Some(found) = content[search..].find(MARKER_OPEN) {
        let start = search + found;
        let open_end = start + MARKER_OPEN.len();
        let Some(close) = content[open_end..].find(']') else {
            break;
        };
        let end = open_end + close + 1;
        if is_loadable_ref(&content[open_end..end - 1]) {
            kept.push_str(&content[pos..start]);
            pos = end;
            images += 1;
        }
        search = end;
    }
    kept.push_str(&content[pos..]);
    (strip(&kept).len() as u64, images)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn markers_follow_the_pinned_rules() {
        assert_eq!(strip_sent_images("  hi [IMAGE:/a.png] "), (2, 1));
        assert_eq!(strip_sent_images("[IMAGE:]x"), (9, 0));
        assert_eq!(
            strip_sent_images("[IMAGE: C:\\x] [IMAGE:rel] [IMAGE:"),
            (19, 1)
        );
        assert_eq!(strip_sent_images("\u{3000}é\u{1c}"), (3, 0));
    }
}
