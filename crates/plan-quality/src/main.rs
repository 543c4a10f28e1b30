//! `accel-plan-quality`: the planner's quality benchmarks (issue 22), `ilp` and `frag`; text by
//! default, one JSON object with `--json`. `scripts/bench_plan_quality.py` runs both and writes
//! docs/BENCHMARKS.md.

use std::io::Write;
use std::time::Instant;

use accel_plan_quality::{exact, frag};
use anyhow::Result;
use clap::{Parser, Subcommand};

/// Quality benchmarks for accel's placement planner: its gang placements against an exact ILP
/// optimum, and the fragmentation a day of jobs leaves behind.
#[derive(Debug, Parser)]
#[command(name = "accel-plan-quality", version)]
struct Cli {
    /// Print one JSON object instead of text.
    #[arg(long, global = true)]
    json: bool,
    #[command(subcommand)]
    command: Command,
}

#[derive(Debug, Subcommand)]
enum Command {
    /// Random gangs (2-32 bundles of 1-8 devices, `same` rack or node or none, some `spread`)
    /// on random mixed clusters of embedded samples with some devices taken: the planner's
    /// placement against the optimum of an integer linear program over every valid device set
    /// (microlp), both scored by the same objective (each bundle's intrinsic score terms plus
    /// the pack bonus). Reports how often the planner equals the optimum (goal: 95%), the gaps,
    /// infeasibility agreement and both sides' times.
    Ilp {
        /// Instances to generate.
        #[arg(long, default_value_t = 200)]
        instances: usize,
        /// Nodes per cluster.
        #[arg(long, default_value_t = 64)]
        nodes: usize,
        #[arg(long, default_value_t = 22)]
        seed: u64,
        /// Seconds the solver may take on one instance; past it the instance counts as `time_limit`.
        #[arg(long, default_value_t = 10.0)]
        time_limit: f64,
        /// Skip instances with more valid device sets than this in all.
        #[arg(long, default_value_t = 30_000)]
        max_options: usize,
        /// Also generate requests with sub-groups (`groups`) and a hard tier cap (`within`),
        /// reported apart, with a count of planner placements that break those constraints.
        #[arg(long)]
        groups: bool,
        /// Seconds the planner may take on one instance (beyond the solver's limit) before its
        /// child process is stopped and the instance counts as `planner_timeout`.
        #[arg(long, default_value_t = 30.0)]
        planner_limit: f64,
        /// Run every instance in this process instead of a child process each (a planner that
        /// never returns then stops the whole run).
        #[arg(long)]
        in_process: bool,
        /// Print one line per instance to stderr as it finishes.
        #[arg(long)]
        verbose: bool,
    },
    /// One instance of `ilp`, as `ilp` runs it in a child process: prints the case as a JSON line
    /// after the solver and again after the planner.
    #[command(hide = true)]
    IlpCase {
        #[arg(long)]
        index: usize,
        #[arg(long)]
        nodes: usize,
        #[arg(long)]
        seed: u64,
        #[arg(long)]
        time_limit: f64,
        #[arg(long)]
        max_options: usize,
        #[arg(long)]
        groups: bool,
    },
    /// A day of jobs on NVL72 domains (18 trays of 4 GPUs each) and 8-GPU boxes: 80% small jobs
    /// of 1-4 GPUs in one tray, 17% gangs of 8-32 GPUs in one NVLink clique, 3% whole-domain
    /// jobs (18 bundles of 4). The identical stream is placed by the planner with domain
    /// bin-packing, by the planner without it, and by first fit; a job that does not fit when it
    /// arrives is dropped. Reports the share of whole free NVL72 domains over time and at the
    /// end, rejected jobs by kind, and utilisation.
    Frag {
        /// NVL72 domains.
        #[arg(long, default_value_t = 16)]
        domains: usize,
        /// 8-GPU boxes (dgx-h100 and hgx-b200).
        #[arg(long, default_value_t = 32)]
        others: usize,
        /// Hours of stream.
        #[arg(long, default_value_t = 24.0)]
        hours: f64,
        /// Hours at the start that are placed but not measured.
        #[arg(long, default_value_t = 3.0)]
        warmup_hours: f64,
        /// Offered load (device-hours asked over device-hours available).
        #[arg(long, default_value_t = 0.85)]
        load: f64,
        /// Streams to run, seeds `seed`, `seed + 1`...; counts are summed and shares averaged.
        #[arg(long, default_value_t = 4)]
        streams: usize,
        #[arg(long, default_value_t = 22)]
        seed: u64,
    },
}

fn main() -> Result<()> {
    let cli = Cli::parse();
    let mut out = std::io::stdout().lock();
    let started = Instant::now();
    match cli.command {
        Command::IlpCase { index, nodes, seed, time_limit, max_options, groups } => {
            let cfg = exact::Config {
                instances: index + 1,
                nodes,
                seed,
                time_limit,
                max_options,
                groups,
                planner_limit: 0.0,
            };
            let inst = exact::instance_at(&cfg, index)?;
            let print = |c: &exact::Case| {
                let mut out = std::io::stdout().lock();
                // A broken pipe means the parent is gone; nothing is left to tell.
                let _ = serde_json::to_writer(&mut out, c).map(|_| writeln!(out)).map(|_| out.flush());
            };
            let case = exact::run_case(index, &inst, &cfg, print)?;
            print(&case);
        }
        Command::Ilp {
            instances,
            nodes,
            seed,
            time_limit,
            max_options,
            groups,
            planner_limit,
            in_process,
            verbose,
        } => {
            let cfg = exact::Config { instances, nodes, seed, time_limit, max_options, groups, planner_limit };
            let exe = std::env::current_exe()?;
            let report = exact::run(&cfg, (!in_process).then_some(exe.as_path()), |c| {
                if verbose {
                    eprintln!(
                        "{:>4} {:<14} {:>2}x {:>3} dev {:>6} opts {:<28} planner {:>8.3} ms solver {:>9.1} ms {} {}",
                        c.index,
                        format!("{:?}", c.verdict),
                        c.bundles,
                        c.devices,
                        c.options,
                        c.shape,
                        c.planner_ms,
                        c.solver_ms,
                        c.planner_own.map(|[a, b]| format!("own score {a:.1} vs optimum's {b:.1}")).unwrap_or_default(),
                        c.note.as_deref().unwrap_or("")
                    );
                }
            })?;
            if cli.json {
                let mut v = serde_json::to_value(&report)?;
                v["wall_s"] = started.elapsed().as_secs_f64().into();
                serde_json::to_writer_pretty(&mut out, &v)?;
                writeln!(out)?;
            } else {
                writeln!(out, "{instances} instances on {nodes} nodes (seed {seed}):")?;
                print_summary(&mut out, "without sub-groups", &report.plain)?;
                if let Some(s) = &report.extended {
                    print_summary(&mut out, "with sub-groups or a tier cap", s)?;
                }
                writeln!(out, "{:.1} s", started.elapsed().as_secs_f64())?;
            }
        }
        Command::Frag { domains, others, hours, warmup_hours, load, streams, seed } => {
            let cfg = frag::Config { domains, others, hours, warmup_hours, load, seed };
            let report = frag::run(&cfg, streams, &frag::Placer::ALL)?;
            if cli.json {
                let mut v = serde_json::to_value(&report)?;
                v["wall_s"] = started.elapsed().as_secs_f64().into();
                serde_json::to_writer_pretty(&mut out, &v)?;
                writeln!(out)?;
            } else {
                writeln!(
                    out,
                    "{} NVL72 domains + {} boxes ({} devices), {} streams of {} h ({} jobs in all; measured after {} h), load {}:",
                    report.domains, report.others, report.devices, streams, hours, report.jobs, warmup_hours, load
                )?;
                for r in &report.runs {
                    writeln!(
                        out,
                        "  {:<11} whole free domains mean {:.3} end {:.3}; rejected small {} gang {} whole {}/{}; utilisation {:.3} (nvl72 {:.3}); {:.0} ms placing",
                        format!("{:?}", r.placer),
                        r.mean_whole_free,
                        r.end_whole_free,
                        r.rejected.small,
                        r.rejected.gang,
                        r.rejected.whole,
                        r.offered.whole,
                        r.utilisation,
                        r.nvl72_utilisation,
                        r.place_ms
                    )?;
                }
                writeln!(out, "{:.1} s", started.elapsed().as_secs_f64())?;
            }
        }
    }
    Ok(())
}

fn print_summary(out: &mut impl Write, title: &str, s: &exact::Summary) -> Result<()> {
    writeln!(
        out,
        "  {title}: {} instances, {} decided ({} skipped at the search budget, {} over the option limit, {} past the time limit)",
        s.instances, s.decided, s.skipped_budget, s.skipped_options, s.time_limit
    )?;
    writeln!(
        out,
        "    equal to the optimum {} + both infeasible {} = {:.1}% of decided (goal {:.0}%: {}); equal on {:.1}% of those both placed",
        s.equal,
        s.both_infeasible,
        s.equal_rate * 100.0,
        exact::GOAL * 100.0,
        if s.goal_met { "met" } else { "not met" },
        s.equal_rate_feasible * 100.0
    )?;
    writeln!(
        out,
        "    below it {} (mean gap {:.2}%, worst {:.2}%; {} trades its own score prefers, {} search misses); planner-only infeasible {}; ILP-only infeasible {}; planner invalid {}; planner past its time limit {}",
        s.gap,
        s.mean_gap * 100.0,
        s.worst_gap * 100.0,
        s.gap_trades,
        s.gap_misses,
        s.planner_only_infeasible,
        s.ilp_only_infeasible,
        s.planner_invalid,
        s.planner_timeout
    )?;
    writeln!(
        out,
        "    median times: planner {:.3} ms, options {:.1} ms, solver {:.1} ms (solver/planner {:.0}x)",
        s.median_planner_ms, s.median_options_ms, s.median_solver_ms, s.median_solver_over_planner
    )?;
    Ok(())
}
