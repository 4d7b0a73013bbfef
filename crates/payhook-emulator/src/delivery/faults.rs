//! The injected faults' decisions: each a pure function of the fault seed and
//! what it is about (the event, the endpoint, the copy, the attempt), so the
//! same seed and the same API calls give the same faults.

use super::Job;

/// Kinds of seeded decision, so each one draws its own number.
#[derive(Clone, Copy)]
#[repr(u64)]
pub(super) enum Draw {
    Duplicate = 1,
    Concurrent = 2,
    Jitter = 3,
    Undeliverable = 4,
}

/// SplitMix64: a well-mixed 64-bit value from any input.
pub(super) fn mix(mut z: u64) -> u64 {
    z = z.wrapping_add(0x9E37_79B9_7F4A_7C15);
    z = (z ^ (z >> 30)).wrapping_mul(0xBF58_476D_1CE4_E5B9);
    z = (z ^ (z >> 27)).wrapping_mul(0x94D0_49BB_1331_11EB);
    z ^ (z >> 31)
}

/// A number in `[0, 2^32)` fixed by the seed and what is being decided: the
/// same seed and the same sequence of API calls give the same faults,
/// whatever order the deliveries happen to run in.
pub(super) fn draw(seed: u64, draw: Draw, job: &Job, attempt: u32) -> u64 {
    let parts = [
        draw as u64,
        job.event_seq,
        job.endpoint_seq,
        u64::from(job.copy),
        u64::from(attempt),
    ];
    let drawn = parts.iter().fold(mix(seed), |acc, part| mix(acc ^ part));
    // A resend draws its own numbers; the event's own deliveries keep the
    // pattern they had before resends existed.
    let drawn = if job.resend == 0 {
        drawn
    } else {
        mix(drawn ^ job.resend)
    };
    drawn >> 32
}

/// Whether the `undeliverable` fault picked the event created `event_seq`-th:
/// one draw per event, whatever the endpoint, copy or attempt, so every
/// attempt of it to every endpoint fails alike.
pub(super) fn undeliverable(seed: u64, probability: f64, event_seq: u64) -> bool {
    if probability <= 0.0 {
        return false;
    }
    let drawn = [Draw::Undeliverable as u64, event_seq]
        .iter()
        .fold(mix(seed), |acc, part| mix(acc ^ part));
    happens(probability, drawn >> 32)
}

pub(super) fn happens(probability: f64, drawn: u64) -> bool {
    // `drawn` < 2^32, exact in f64.
    (drawn as f64) < probability * 4_294_967_296.0
}

#[cfg(test)]
mod tests {
    use std::sync::Weak;

    use super::*;

    #[test]
    fn draws_depend_on_seed_and_subject_only() {
        let job = Job {
            event: Weak::new(),
            event_id: "evt_x".into(),
            event_seq: 3,
            endpoint_id: "we_x".into(),
            endpoint_seq: 1,
            copy: 0,
            resend: 0,
        };
        assert_eq!(
            draw(7, Draw::Duplicate, &job, 0),
            draw(7, Draw::Duplicate, &job, 0)
        );
        assert_ne!(
            draw(7, Draw::Duplicate, &job, 0),
            draw(8, Draw::Duplicate, &job, 0)
        );
        assert_ne!(draw(7, Draw::Duplicate, &job, 0), draw(7, Draw::Jitter, &job, 0));
        assert!(happens(1.0, (1 << 32) - 1));
        assert!(!happens(0.0, 0));
    }

    #[test]
    fn undeliverable_events_are_a_seeded_share() {
        let picked = |seed| {
            (0..1000)
                .filter(|seq| undeliverable(seed, 0.3, *seq))
                .collect::<Vec<_>>()
        };
        assert_eq!(picked(7), picked(7));
        assert_ne!(picked(7), picked(8));
        assert!((250..350).contains(&picked(7).len()), "{}", picked(7).len());
        assert!((0..1000).all(|seq| undeliverable(7, 1.0, seq)));
        assert!((0..1000).all(|seq| !undeliverable(7, 0.0, seq)));
    }
}
