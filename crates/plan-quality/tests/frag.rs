//! The fragmentation harness: the three placers see the identical stream, the accounting adds
//! up, and whole free domains are counted as they are.

use accel_plan::{Bundle, Request};
use accel_plan_quality::clusters::{nvl72, TRAYS_PER_DOMAIN};
use accel_plan_quality::frag::{self, gang, simulate, Config, Job, Kind, Placer, View};

#[test]
fn three_placers_do_equal_work_on_a_small_stream() {
    let cfg = Config { domains: 2, others: 2, hours: 6.0, warmup_hours: 1.0, load: 0.8, seed: 5 };
    let report = frag::run(&cfg, 2, &Placer::ALL).unwrap();
    assert_eq!(report.domains, 2);
    assert_eq!(report.devices, 2 * TRAYS_PER_DOMAIN * 4 + 2 * 8);
    assert!(report.jobs > 20, "{} jobs", report.jobs);
    let first = &report.runs[0];
    assert!(first.offered.small > 0 && first.offered.gang > 0, "{:?}", first.offered);
    for r in &report.runs {
        // The same jobs, offered the same load, to every placer.
        assert_eq!(r.offered, first.offered);
        assert_eq!(r.offered_load, first.offered_load);
        for (o, p, x) in [
            (r.offered.small, r.placed.small, r.rejected.small),
            (r.offered.gang, r.placed.gang, r.rejected.gang),
            (r.offered.whole, r.placed.whole, r.rejected.whole),
        ] {
            assert_eq!(o, p + x, "{r:?}");
        }
        for share in [r.mean_whole_free, r.end_whole_free, r.utilisation, r.nvl72_utilisation] {
            assert!((0.0..=1.0).contains(&share), "{r:?}");
        }
        assert!(r.utilisation > 0.0, "{r:?}");
    }
}

fn job(arrival: u64, kind: Kind, request: Request) -> Job {
    Job { arrival, duration: 10 * 3600, kind, request }
}

/// Two domains, no boxes: one small job breaks one domain, a whole-domain job takes the other,
/// and a second whole-domain job finds none; every placer agrees on this much.
#[test]
fn whole_domains_are_counted_and_a_broken_domain_rejects_a_whole_job() {
    let cluster = nvl72(2, 0).unwrap();
    let view = View::new(&cluster).unwrap();
    assert_eq!(view.domains(), 2);
    let jobs = vec![
        job(0, Kind::Small, Request::new(vec![Bundle::new(1)])),
        job(60, Kind::Whole, gang(TRAYS_PER_DOMAIN, &view.clique)),
        job(120, Kind::Whole, gang(TRAYS_PER_DOMAIN, &view.clique)),
    ];
    let cfg = Config { domains: 2, others: 0, hours: 1.0, warmup_hours: 0.0, load: 0.0, seed: 1 };
    for placer in Placer::ALL {
        let run = simulate(&cfg, &cluster, &view, &jobs, placer).unwrap();
        assert_eq!((run.placed.small, run.placed.whole, run.rejected.whole), (1, 1, 1), "{placer:?}: {run:?}");
        assert_eq!(run.end_whole_free, 0.0, "{placer:?}");
        // Half a domain whole for the first minute, none after: 0.5 * 60 / 3600.
        assert!((run.mean_whole_free - 0.5 * 60.0 / 3600.0).abs() < 1e-9, "{placer:?}: {}", run.mean_whole_free);
    }
}
