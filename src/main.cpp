// divsim: an MPI simulator of data-parallel training divergence.
//
// main() is the program's edge: it turns exceptions into the documented exit codes
//   0 success; 2 usage/configuration/input error (nothing written); 3 runtime I/O error;
//   4 stopped by train.on_nonfinite=stop; 75 stopped by SIGTERM after a checkpoint; 1 anything else
// and makes sure one failing rank brings the whole job down instead of hanging it.
#include <mpi.h>

#include <cstdio>
#include <exception>
#include <string>

#include "comm/abort_job.hpp"
#include "comm/fatal_signals.hpp"
#include "config/options.hpp"
#include "record/analysis_command.hpp"
#include "record/recover_command.hpp"
#include "train/termination.hpp"
#include "train/trainer.hpp"


int main(int argc, char** argv) {
  // divsim diagnose|evaluate ...: the analysis package, before MPI starts (it needs none).
  if (argc >= 2 && divsim::is_analysis_command(argv[1])) return divsim::analysis_command(argc, argv);
  divsim::install_fatal_signal_report();
  MPI_Init(&argc, &argv);
  if (argc >= 2 && std::string(argv[1]) == "recover") {  // divsim recover RUN [OUT]: one process, no run
    const int code = divsim::recover_command("divsim recover", argc - 1, argv + 1);
    MPI_Finalize();
    return code;
  }
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  divsim::report_fatal_signals_as_rank(rank);
  divsim::install_termination_handler();

  divsim::CliResult cli;
  try {
    cli = divsim::parse_command_line(argc, argv);
  } catch (const divsim::ConfigError& e) {
    // Every rank parses the same arguments and fails the same way: one message, from rank 0.
    if (rank == 0) std::fprintf(stderr, "divsim: error: %s\n", e.what());
    MPI_Finalize();
    return 2;
  }
  if (cli.action != divsim::CliAction::run) {
    if (rank == 0) std::fputs(cli.text.c_str(), stdout);
    MPI_Finalize();
    return 0;
  }

  try {
    const divsim::RunSummary s = divsim::run_training(cli.config, MPI_COMM_WORLD);
    if (rank == 0) {
      const std::int64_t ran = s.steps - s.first_step;
      const std::string resumed =
          s.first_step > 0 ? " (resumed at step " + std::to_string(s.first_step) + ": " + std::to_string(ran) + " steps in this start)" : "";
      std::printf("divsim: %lld steps%s, W=%d, %.1f steps/s, final eval loss %.4f..%.4f accuracy %.4f..%.4f "
                  "(over ranks), wrote %s\n",
                  static_cast<long long>(s.steps), resumed.c_str(), s.world_size, static_cast<double>(ran) / s.seconds,
                  s.eval_loss_min, s.eval_loss_max, s.eval_acc_min, s.eval_acc_max, s.output.c_str());
    }
  } catch (const divsim::SetupFailure& f) {
    // Set-up failures are agreed by all ranks: one message, a clean exit, nothing written. The barrier
    // keeps every rank alive until the message is out: mpiexec ends the job when a rank exits with an
    // error, and a rank exiting first once cost the reporting one its message (seen under load).
    if (f.report()) {
      std::fprintf(stderr, "divsim: error: %s\n", f.what());
      std::fflush(stderr);
    }
    MPI_Barrier(MPI_COMM_WORLD);
    MPI_Finalize();
    return f.exit_code();
  } catch (const divsim::Preempted& e) {
    // SIGTERM (Slurm's --signal, preemption): every rank stopped after the same step, checkpointed.
    if (rank == 0) std::fprintf(stderr, "divsim: %s\n", e.what());
    MPI_Finalize();
    return divsim::kExitPreempted;
  } catch (const divsim::NumericStop& e) {
    // Every rank stops at the same step (the decision is agreed); the file is complete.
    if (rank == 0) std::fprintf(stderr, "divsim: stopped: %s\n", e.what());
    MPI_Finalize();
    return 4;
  } catch (const std::exception& e) {
    // A rank failing alone during the run must not leave the others waiting in a collective.
    divsim::abort_job(MPI_COMM_WORLD, divsim::exit_code_for(std::current_exception()), e.what());
  }
  MPI_Finalize();
  return 0;
}
