//! A fuzzer over the ranks' configuration check, run as a test on one process.
//!
//! Each case draws the configurations of 1 to 6 ranks (every field, values near the integer
//! limits, equal or differing in one to three fields, sometimes bytes that are not a
//! configuration at all) and runs what each rank runs: [`remat_dist::agree`] over a collective
//! whose all-gather hands back every rank's description. The oracle is a plain field-by-field
//! comparison written here: equal configurations pass on every rank; otherwise every rank fails
//! with the same one line naming the oracle's field, rank and both values.
//!
//! `REMAT_FUZZ_CASES` (default 20000) sets the count, `REMAT_FUZZ_SEED` the first seed.

#[path = "../../benches/common/xorshift.rs"]
mod xorshift;

use remat_core::Result;
use remat_dist::{first_difference, Collective, Pending, RankConfig, FIELDS};
use xorshift::Rng;

impl Rng {
    /// A value near a limit, a small one, or anything.
    fn value(&mut self) -> u64 {
        const EDGES: [u64; 12] = [
            0,
            1,
            2,
            3,
            u32::MAX as u64,
            1 << 32,
            (1 << 53) - 1,
            1 << 53,
            (1 << 53) + 1,
            i64::MAX as u64,
            u64::MAX - 1,
            u64::MAX,
        ];
        match self.below(3) {
            0 => EDGES[self.below(EDGES.len())],
            1 => self.below(64) as u64,
            _ => self.next(),
        }
    }
}

/// The oracle's view of a configuration: each field read by name, in the documented order.
fn fields(c: &RankConfig) -> [(&'static str, u64); 13] {
    [
        ("world_size", c.world_size),
        ("batch", c.batch),
        ("shard_rows", c.shard_rows),
        ("seed", c.seed),
        ("steps", c.steps),
        ("resume", c.resume),
        ("first_step", c.first_step),
        ("optimizer", c.optimizer),
        ("optimizer_step", c.optimizer_step),
        ("bucket_bytes", c.bucket_bytes),
        ("buckets", c.buckets),
        ("gradient_values", c.gradient_values),
        ("bucket_layout", c.bucket_layout),
    ]
}

/// The first field on which some rank differs from rank 0, and the first such rank.
fn oracle(configs: &[RankConfig]) -> Option<(&'static str, usize, u64, u64)> {
    let reference = fields(&configs[0]);
    for (f, (name, value)) in reference.iter().enumerate() {
        for (rank, c) in configs.iter().enumerate().skip(1) {
            let theirs = fields(c)[f].1;
            if theirs != *value {
                return Some((name, rank, *value, theirs));
            }
        }
    }
    None
}

/// One rank of a job whose all-gather returns what every rank sent (`sent`, in rank order).
struct Gathered<'a> {
    rank: usize,
    sent: &'a [Vec<u8>],
}

impl Collective for Gathered<'_> {
    fn rank(&self) -> usize {
        self.rank
    }
    fn world_size(&self) -> usize {
        self.sent.len()
    }
    fn start_all_reduce(&mut self, _: Vec<f32>) -> Result<Pending<Vec<f32>>> {
        unreachable!("the agreement only gathers")
    }
    fn broadcast(&mut self, _: Vec<u8>, _: usize) -> Result<Vec<u8>> {
        unreachable!("the agreement only gathers")
    }
    fn all_gather(&mut self, bytes: Vec<u8>) -> Result<Vec<u8>> {
        assert_eq!(bytes, self.sent[self.rank], "a rank gathers what it sent");
        assert_eq!(bytes.len(), RankConfig::BYTES, "one length on every rank, whatever the settings");
        Ok(self.sent.concat())
    }
    fn reduce_scatter(&mut self, _: Vec<f32>) -> Result<Vec<f32>> {
        unreachable!("the agreement only gathers")
    }
    fn barrier(&mut self) -> Result<()> {
        unreachable!("the agreement only gathers")
    }
    fn bytes_sent(&self) -> u64 {
        0
    }
}

/// How a value reads in the message, per field.
fn shown(field: &str, v: u64) -> String {
    match (field, v) {
        ("resume", 0) => "no resumed state".into(),
        ("resume", v) => format!("the state with digest {v:016x}"),
        ("bucket_layout", v) => format!("{v:016x}"),
        ("optimizer", 0) => "none given".into(),
        ("optimizer", 1) => "AdamW".into(),
        ("optimizer", 2) => "AdamW sharded (ZeRO-1)".into(),
        ("optimizer", v) => format!("unknown optimizer {v}"),
        (_, v) => v.to_string(),
    }
}

fn random_config(rng: &mut Rng) -> RankConfig {
    let mut v = [0u64; 13];
    v.iter_mut().for_each(|x| *x = rng.value());
    RankConfig::from_values(v)
}

/// `base` with one to three fields changed (possibly to the same value).
fn mutated(rng: &mut Rng, base: &RankConfig) -> RankConfig {
    let mut v = base.values();
    for _ in 0..1 + rng.below(3) {
        let f = rng.below(v.len());
        v[f] = match rng.below(3) {
            0 => v[f].wrapping_add(1),
            1 => v[f].wrapping_sub(1),
            _ => rng.value(),
        };
    }
    RankConfig::from_values(v)
}

fn run_case(rng: &mut Rng, case: u64) -> bool {
    let ranks = 1 + rng.below(6);
    let base = random_config(rng);
    let configs: Vec<RankConfig> =
        (0..ranks).map(|r| if r > 0 && rng.below(2) == 0 { mutated(rng, &base) } else { base }).collect();
    let sent: Vec<Vec<u8>> = configs.iter().map(RankConfig::to_bytes).collect();
    for bytes in &sent {
        assert_eq!(RankConfig::from_bytes(bytes).as_ref(), configs.get(sent.iter().position(|b| b == bytes).unwrap()));
    }
    let expected = oracle(&configs);
    let found = first_difference(&configs).map(|d| (d.field, d.rank, d.reference, d.value));
    assert_eq!(found, expected, "case {case}: {configs:?}");
    let results: Vec<std::result::Result<(), String>> = (0..ranks)
        .map(|rank| {
            remat_dist::agree(&mut Gathered { rank, sent: &sent }, &configs[rank]).map_err(|e| {
                let mismatch =
                    matches!(e, remat_core::Error::Collective { kind: remat_core::CollectiveKind::Mismatch, .. });
                assert!(mismatch, "case {case}: {e:?}");
                e.to_string()
            })
        })
        .collect();
    match expected {
        None => assert!(results.iter().all(|r| r.is_ok()), "case {case}: equal configurations refused: {results:?}"),
        Some((field, rank, reference, value)) => {
            let what = FIELDS.iter().find(|f| f.key == field).unwrap().what;
            for result in &results {
                let text = result.as_ref().expect_err("a difference is an error on every rank");
                assert_eq!(Some(text), results[0].as_ref().err(), "case {case}: the same line on every rank");
                assert!(text.starts_with(&format!("ranks disagree on {what}: rank 0 has ")), "case {case}: {text}");
                assert!(text.contains(&format!(", rank {rank} has ")), "case {case}: {text}");
                let line = format!(
                    "ranks disagree on {what}: rank 0 has {}, rank {rank} has {} (every rank must be started with the same settings)",
                    shown(field, reference),
                    shown(field, value)
                );
                assert_eq!(text, &line, "case {case}");
                assert!(!text.contains('\n'), "case {case}: one line: {text}");
            }
        }
    }
    expected.is_some()
}

/// A rank whose description is not one (another program, a truncated message) is refused by
/// name on every rank, never read as settings.
fn run_garbage_case(rng: &mut Rng, case: u64) {
    let ranks = 2 + rng.below(4);
    let config = random_config(rng);
    let bad = 1 + rng.below(ranks - 1);
    let mut sent: Vec<Vec<u8>> = vec![config.to_bytes(); ranks];
    let flip = rng.below(RankConfig::BYTES.min(8)); // the leading magic word
    sent[bad][flip] ^= 1 << rng.below(8);
    for rank in (0..ranks).filter(|&r| r != bad) {
        let err = remat_dist::agree(&mut Gathered { rank, sent: &sent }, &config).unwrap_err();
        let mismatch = matches!(err, remat_core::Error::Collective { kind: remat_core::CollectiveKind::Mismatch, .. });
        assert!(mismatch, "case {case}: {err:?}");
        let text = err.to_string();
        assert!(
            text.contains(&format!("rank {bad} sent a run configuration remat cannot read")),
            "case {case}: {text}"
        );
    }
}

#[test]
fn the_first_difference_named_is_the_oracles_and_equal_configurations_pass() {
    let cases: u64 = std::env::var("REMAT_FUZZ_CASES").ok().and_then(|v| v.parse().ok()).unwrap_or(20_000);
    let seed: u64 = std::env::var("REMAT_FUZZ_SEED").ok().and_then(|v| v.parse().ok()).unwrap_or(1);
    let mut rng = Rng(seed.max(1).wrapping_mul(0x9e37_79b9_7f4a_7c15) | 1);
    let (mut differing, mut equal) = (0u64, 0u64);
    for case in 0..cases {
        if case % 50 == 49 {
            run_garbage_case(&mut rng, case);
        } else if run_case(&mut rng, case) {
            differing += 1;
        } else {
            equal += 1;
        }
    }
    println!("{cases} cases: {differing} with a difference, {equal} equal, {} unreadable", cases - differing - equal);
    if cases >= 100 {
        assert!(differing > cases / 10 && equal > cases / 10, "both outcomes drawn: {differing} / {equal}");
    }
}
