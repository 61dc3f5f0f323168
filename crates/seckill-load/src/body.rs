//! Two fields read from an answer's body without parsing the whole of it (every answer is
//! read, and most are a few dozen bytes of flat JSON).

/// The number after `field` in an answer's body.
pub(crate) fn field_number(body: &[u8], field: &[u8]) -> Option<u64> {
    let at = find(body, field)? + field.len();
    let digits = body[at..].iter().take_while(|b| b.is_ascii_digit()).count();
    std::str::from_utf8(&body[at..at + digits])
        .ok()?
        .parse()
        .ok()
}

/// The string after `field` (which ends with its opening quote), up to its closing quote.
pub(crate) fn field_string(body: &[u8], field: &[u8]) -> Option<String> {
    let at = find(body, field)? + field.len();
    let len = body[at..].iter().position(|&b| b == b'"')?;
    String::from_utf8(body[at..at + len].to_vec()).ok()
}

pub(crate) fn find(body: &[u8], field: &[u8]) -> Option<usize> {
    body.windows(field.len()).position(|w| w == field)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn reads_work_us_and_the_order_from_an_answer() {
        let body = br#"{"outcome":"deducted","order":"0190-ab","remaining":3,"work_us":2031}"#;
        assert_eq!(field_number(body, b"\"work_us\":"), Some(2031));
        assert_eq!(
            field_string(body, b"\"order\":\"").as_deref(),
            Some("0190-ab")
        );
        let sold_out = br#"{"outcome":"sold_out"}"#;
        assert_eq!(field_number(sold_out, b"\"work_us\":"), None);
        assert_eq!(field_string(sold_out, b"\"order\":\""), None);
    }
}
