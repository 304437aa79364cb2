//! Sizes in bytes, read one way everywhere kvpilot takes one (`spec.cache.capacity`, the memory
//! of a fleet, `kvpilot cache-runtime --capacity`): a Kubernetes quantity (`64Gi`, `16G`,
//! `1.5Gi`, `1e9`, `1073741824`), and, since people write them, the byte units `GiB`/`GB` with
//! or without a space before them (`64 GB` is 64×10⁹ bytes, as `64G` is).

/// The words every caller refuses a size with.
fn not_a_size(text: &str) -> String {
    format!(
        "{text:?} is not a size in bytes: write a Kubernetes quantity such as 64Gi, 512Mi, 16G or 1073741824 \
         (64GiB and 64 GB are read too)"
    )
}

/// The multiplier of a unit as a fraction: Kubernetes' binary and decimal SI suffixes (`m`, a
/// thousandth, included: the API server takes `1500m` as a memory quantity), and the byte units.
fn multiplier(unit: &str) -> Option<(u128, u128)> {
    let binary = |power: u32| Some((1u128 << (10 * power), 1));
    let decimal = |power: u32| Some((10u128.pow(3 * power), 1));
    match unit {
        "" | "B" => Some((1, 1)),
        "m" => Some((1, 1000)),
        "Ki" | "KiB" => binary(1),
        "Mi" | "MiB" => binary(2),
        "Gi" | "GiB" => binary(3),
        "Ti" | "TiB" => binary(4),
        "Pi" | "PiB" => binary(5),
        "Ei" | "EiB" => binary(6),
        "k" | "kB" | "KB" => decimal(1),
        "M" | "MB" => decimal(2),
        "G" | "GB" => decimal(3),
        "T" | "TB" => decimal(4),
        "P" | "PB" => decimal(5),
        "E" | "EB" => decimal(6),
        _ => None,
    }
}

/// The number of bytes `text` stands for, rounded up to a whole byte as Kubernetes rounds a
/// memory quantity; errors in the words every caller uses.
pub fn parse_bytes(text: &str) -> Result<u64, String> {
    parse_scaled(text, 1)
}

/// Thousandths of the quantity `text` (a CPU quantity in millicores: `500m` → 500, `2` → 2000),
/// rounded up as Kubernetes rounds a CPU quantity.
pub fn parse_millis(text: &str) -> Result<u64, String> {
    parse_scaled(text, 1000)
}

/// `text` times `scale`, rounded up to a whole number.
fn parse_scaled(text: &str, scale: u128) -> Result<u64, String> {
    let trimmed = text.trim();
    let number_end = trimmed.find(|c: char| !(c.is_ascii_digit() || c == '.' || c == '+')).unwrap_or(trimmed.len());
    let (number, rest) = trimmed.split_at(number_end);
    let number = number.strip_prefix('+').unwrap_or(number);
    let (whole, fraction) = number.split_once('.').unwrap_or((number, ""));
    let digits_only = |s: &str| s.bytes().all(|b| b.is_ascii_digit());
    if whole.is_empty() && fraction.is_empty() || !digits_only(whole) || !digits_only(fraction) || fraction.len() > 9 {
        return Err(not_a_size(text));
    }
    // A decimal exponent (`1e9`, `5E-3`) or a unit, after optional spaces before a unit.
    let (numerator_scale, denominator_scale) = match rest.strip_prefix(['e', 'E']) {
        Some(exponent) if !exponent.is_empty() && exponent != "-" => {
            let exponent: i32 = exponent.parse().map_err(|_| not_a_size(text))?;
            if exponent.unsigned_abs() > 18 {
                return Err(not_a_size(text));
            }
            if exponent >= 0 { (10u128.pow(exponent as u32), 1) } else { (1, 10u128.pow(exponent.unsigned_abs())) }
        }
        _ => multiplier(rest.trim_start()).ok_or_else(|| not_a_size(text))?,
    };
    let mantissa: u128 = format!("{whole}{fraction}").parse().map_err(|_| not_a_size(text))?;
    let denominator = 10u128.pow(fraction.len() as u32) * denominator_scale;
    let too_many = || format!("{text:?} is more bytes than any machine has");
    let bytes = mantissa
        .checked_mul(numerator_scale)
        .and_then(|n| n.checked_mul(scale))
        .ok_or_else(too_many)?
        .div_ceil(denominator);
    u64::try_from(bytes).map_err(|_| too_many())
}

/// The size of a store (`spec.cache.capacity`, `kvpilot cache-runtime --capacity`): a size in
/// bytes, and not zero.
pub fn parse_capacity(text: &str) -> Result<u64, String> {
    match parse_bytes(text)? {
        0 => Err(format!("{text:?} is 0 bytes: a store that size holds no page; give it at least one page's size")),
        bytes => Ok(bytes),
    }
}

/// `bytes` in the largest binary unit that divides it (`264Gi`, `512Mi`, `1536`), as a user
/// writes a memory quantity.
pub fn format_bytes(bytes: u64) -> String {
    for (suffix, power) in [("Ei", 6), ("Pi", 5), ("Ti", 4), ("Gi", 3), ("Mi", 2), ("Ki", 1)] {
        let unit = 1u64 << (10 * power);
        if bytes >= unit && bytes.is_multiple_of(unit) {
            return format!("{}{suffix}", bytes / unit);
        }
    }
    bytes.to_string()
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    #[test]
    fn cpu_quantities_read_in_millicores() {
        for (text, millis) in
            [("500m", 500), ("2", 2000), ("0.5", 500), ("1.5", 1500), ("100m", 100), ("1e3", 1_000_000)]
        {
            assert_eq!(parse_millis(text), Ok(millis), "{text}");
        }
        assert!(parse_millis("two").is_err());
    }

    #[test]
    fn kubernetes_quantities_and_byte_units_read_alike() {
        for (text, bytes) in [
            ("64Gi", 64u64 << 30),
            ("64GiB", 64 << 30),
            ("64 GiB", 64 << 30),
            ("64G", 64_000_000_000),
            ("64 GB", 64_000_000_000),
            ("512Mi", 512 << 20),
            ("1073741824", 1 << 30),
            ("1.5Gi", 3 << 29),
            ("1e9", 1_000_000_000),
            ("1E3", 1000),
            ("16k", 16_000),
            ("0.5", 1),
            ("+2Ki", 2048),
            ("1500m", 2),
            ("128974848000m", 128_974_848),
        ] {
            assert_eq!(parse_bytes(text), Ok(bytes), "{text}");
        }
    }

    #[test]
    fn anything_else_is_refused_in_the_same_words() {
        for text in ["", "lots", "-1Gi", "64 gigabytes", "64gi", "1.2.3G", "Gi", "1e", "1e99", "99999999999Ei"] {
            let refused = parse_bytes(text).unwrap_err();
            assert!(
                refused.contains("is not a size in bytes") || refused.contains("more bytes than any machine"),
                "{text}: {refused}"
            );
        }
    }

    #[test]
    fn sizes_are_written_in_binary_units() {
        assert_eq!(format_bytes(264 << 30), "264Gi");
        assert_eq!(format_bytes((1 << 30) + (512 << 20)), "1536Mi");
        assert_eq!(format_bytes(1000), "1000");
        assert_eq!(format_bytes(0), "0");
    }

    proptest! {
        #[test]
        fn written_sizes_read_back(bytes in 0u64..(1 << 62)) {
            prop_assert_eq!(parse_bytes(&format_bytes(bytes)), Ok(bytes));
        }

        #[test]
        fn no_text_panics(text in "\\PC{0,24}") {
            let _ = parse_bytes(&text);
        }
    }
}
