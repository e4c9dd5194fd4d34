# SPDX-License-Identifier: BSL-1.0
# plots.gp: the curves of bench/RESULTS.md, drawn from the CSV files the
# benchmarks write (bench/run_all.sh runs it; gnuplot-nox). A plot whose CSV is
# missing or empty is skipped with a line on stderr.
#
#   gnuplot -e "data='bench/out'; out='bench/plots'; stamp='2026-11-22, commit abc1234'" bench/plots.gp
#
# data/overhead.csv      (bench_overhead --csv)       -> out/overhead_vs_duration.png
# data/curves.csv        (bench_curves --csv)         -> out/tasks_per_s_vs_workers.png,
#                                                        out/master_rss_vs_workers.png,
#                                                        out/idle_cost_vs_workers.png
# data/curves_relay.csv  (bench_curves --relay 1 --csv): the same workers behind
#                        one relay, drawn on the same plots when present
# data/curves.csv + data/curves_slurm.csv (bench_curves_slurm --csv)
#                                                     -> out/all_up_vs_workers.png

if (!exists("data")) data = 'bench/out'
if (!exists("out")) out = 'bench/plots'
if (!exists("stamp")) stamp = ''
have(f) = system(sprintf("[ -s '%s' ] && echo 1 || echo 0", f)) + 0

if (strstrt(GPVAL_TERMINALS, 'pngcairo') > 0) {
  set terminal pngcairo size 1000,620 font ',11' noenhanced
} else {
  set terminal png size 1000,620 noenhanced
}
set datafile separator ','
set grid
set key top right box opaque
set style data linespoints
fo = data.'/overhead.csv'
fc = data.'/curves.csv'
fs = data.'/curves_slurm.csv'
fr = data.'/curves_relay.csv'
sub = (stamp eq '') ? '' : "\n".stamp

# ---- overhead per task against task duration --------------------------------
if (have(fo)) {
  set output out.'/overhead_vs_duration.png'
  set multiplot layout 1,2 title 'Tasks sleeping d, chunksize 1, 2 workers (bench_overhead)'.sub
  set logscale x
  set xlabel 'task duration d [ms]'
  set xtics (0.1, 1, 10, 100)
  set xrange [0.07:140]
  set ylabel 'wall / ideal (ideal = n·d/W)'
  set logscale y
  set key top right
  plot fo using 1:3 skip 1 lw 2 pt 7 title 'fiber::Pool', \
       fo using 1:4 skip 1 lw 2 pt 5 title 'multiprocessing.Pool', \
       fo using 1:5 skip 1 lw 1 pt 1 dt 2 title 'in-process sleeps (C++ control)', \
       1 with lines lw 2 lc rgb 'black' dt 3 title 'ideal'
  unset logscale y
  set ylabel 'overhead per task above its control [µs]'
  set key top left
  plot fo using 1:7 skip 1 lw 2 pt 7 title 'fiber::Pool', \
       fo using 1:8 skip 1 lw 2 pt 5 title 'multiprocessing.Pool', \
       0 with lines lw 2 lc rgb 'black' dt 3 title 'ideal'
  unset multiplot
  unset logscale x
  unset xtics
  set xtics
  unset xrange
  set autoscale x
} else {
  print sprintf("plots.gp: no %s: overhead_vs_duration.png skipped", fo)
}

# ---- tasks/s and master RSS against workers ------------------------------------
if (have(fc)) {
  set output out.'/tasks_per_s_vs_workers.png'
  set title 'Local fiber::Pool: tasks/s against workers (automatic chunksize; bench_curves)'.sub
  set logscale xy 2
  set format y '%.0e'
  set logscale y 10
  set xlabel 'workers'
  set ylabel 'tasks / s'
  set key top left
  cmd = sprintf("'%s' using 1:3 skip 1 lw 2 pt 7 lc 1 title 'empty tasks', '%s' using 1:4 skip 1 lw 2 pt 5 lc 2 title '1 ms tasks'", fc, fc)
  if (have(fr)) {
    cmd = cmd.sprintf(", '%s' using 1:3 skip 1 lw 2 pt 6 lc 1 dt 2 title 'empty tasks, relay', '%s' using 1:4 skip 1 lw 2 pt 4 lc 2 dt 2 title '1 ms tasks, relay'", fr, fr)
  }
  cmd = cmd.sprintf(", '%s' using 1:5 skip 1 with lines lw 1 lc rgb 'black' dt 3 title '1 ms tasks, ideal (workers × 1000/s)'", fc)
  eval('plot '.cmd)
  set format y '%g'

  set output out.'/master_rss_vs_workers.png'
  set title 'Local fiber::Pool: the master process RSS against workers (bench_curves)'.sub
  unset logscale y
  set ylabel 'master RSS [MiB]'
  cmd = sprintf("'%s' using 1:6 skip 1 lw 2 pt 7 lc 1 title 'all workers up', '%s' using 1:7 skip 1 lw 2 pt 5 lc 2 title 'after the two maps'", fc, fc)
  if (have(fr)) {
    cmd = cmd.sprintf(", '%s' using 1:6 skip 1 lw 2 pt 6 lc 1 dt 2 title 'all workers up, relay', '%s' using 1:7 skip 1 lw 2 pt 4 lc 2 dt 2 title 'after the two maps, relay'", fr, fr)
  }
  eval('plot '.cmd)

  set output out.'/idle_cost_vs_workers.png'
  set multiplot layout 1,2 title 'Local fiber::Pool, all workers idle (bench_curves)'.sub
  unset title
  set ylabel "CPU while idle [% of one core]"
  set key top left
  cmd = sprintf("'%s' using 1:9 skip 1 lw 2 pt 7 lc 1 title 'master (heartbeats, bookkeeping)', '%s' using 1:12 skip 1 lw 2 pt 5 lc 2 title 'all workers'", fc, fc)
  if (have(fr)) {
    cmd = cmd.sprintf(", '%s' using 1:9 skip 1 lw 2 pt 6 lc 1 dt 2 title 'master, relay', '%s' using 1:12 skip 1 lw 2 pt 4 lc 2 dt 2 title 'all workers, relay'", fr, fr)
  }
  eval('plot '.cmd)
  set ylabel 'per idle worker [MiB]'
  cmd = sprintf("'%s' using 1:10 skip 1 lw 2 pt 7 lc 1 title 'private (USS)', '%s' using 1:11 skip 1 lw 2 pt 5 lc 2 title 'proportional (PSS)'", fc, fc)
  if (have(fr)) {
    cmd = cmd.sprintf(", '%s' using 1:10 skip 1 lw 2 pt 6 lc 1 dt 2 title 'private, relay', '%s' using 1:11 skip 1 lw 2 pt 4 lc 2 dt 2 title 'proportional, relay'", fr, fr)
  }
  eval('plot '.cmd)
  unset multiplot
  unset logscale
} else {
  print sprintf("plots.gp: no %s: tasks_per_s_vs_workers.png, master_rss_vs_workers.png and idle_cost_vs_workers.png skipped", fc)
}

# ---- time to all workers up against workers -----------------------------------
if (have(fc) || have(fs)) {
  set output out.'/all_up_vs_workers.png'
  set title 'Pool construction to all workers connected (bench_curves, bench_curves_slurm)'.sub
  set logscale x 2
  set logscale y 10
  set xlabel 'workers'
  set ylabel 'time to all workers up [s]'
  set key top left
  cmd = ''
  if (have(fc)) {
    cmd = sprintf("'%s' using 1:2 skip 1 lw 2 pt 7 title 'local (one host)'", fc)
    if (have(fr)) {
      cmd = cmd.sprintf(", '%s' using 1:2 skip 1 lw 2 pt 6 dt 2 title 'local, relay'", fr)
    }
  }
  if (have(fs)) {
    s1 = sprintf("'%s' using 2:(strcol(1) eq 'array' ? $4 : NaN) skip 1 lw 2 pt 5 title 'Slurm, array job'", fs)
    s2 = sprintf("'%s' using 2:(strcol(1) eq 'srun' ? $4 : NaN) skip 1 lw 2 pt 9 title 'Slurm, srun steps'", fs)
    cmd = (cmd eq '') ? s1.', '.s2 : cmd.', '.s1.', '.s2
  }
  eval('plot '.cmd)
  unset logscale
}
