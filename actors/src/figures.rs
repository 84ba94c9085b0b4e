//! The latency figures `annal demo` reports and the benches print: one definition of a
//! quantile, so the two never disagree on what "p99" means.

/// The `q` quantile (0..=1) of `sorted` (ascending), nearest rank; 0 for no samples.
pub fn quantile(sorted: &[u64], q: f64) -> u64 {
    if sorted.is_empty() {
        return 0;
    }
    let rank = (q * sorted.len() as f64).ceil() as usize;
    sorted
        .get(rank.clamp(1, sorted.len()) - 1)
        .copied()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::quantile;

    #[test]
    fn nearest_rank() {
        let samples: Vec<u64> = (1..=100).collect();
        assert_eq!(quantile(&samples, 0.50), 50);
        assert_eq!(quantile(&samples, 0.99), 99);
        assert_eq!(quantile(&samples, 1.0), 100);
        assert_eq!(quantile(&samples, 0.0), 1);
        assert_eq!(quantile(&[7], 0.99), 7);
        assert_eq!(quantile(&[], 0.5), 0);
    }
}
