// zeroplan: the command-line front end. Each subcommand lives in its own file; this one only wires them and
// turns errors into exit statuses: 0 success / the plan fits, 1 the plan does not fit, 2 bad input.
#include <cstdlib>
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/calibrate_command.h"
#include "cli/export_command.h"
#include "cli/model_command.h"
#include "cli/plan_command.h"
#include "cli/recommend_command.h"
#include "cli/run_command.h"
#include "cli/simulate_command.h"
#include "core/input_error.h"

int main(int argc, char** argv) {
  CLI::App app{"zeroplan: will this model fit on my GPUs, with which ZeRO stage, and how fast will it be?"};
  app.require_subcommand(1);
  app.set_version_flag("--version", "zeroplan 0.1.0");
  int status = 0;
  zeroplan::add_plan_command(app, &status);
  zeroplan::add_model_command(app, &status);
  zeroplan::add_simulate_command(app, &status);
  zeroplan::add_recommend_command(app, &status);
  zeroplan::add_run_command(app, &status);
  zeroplan::add_export_command(app, &status);
  zeroplan::add_calibrate_command(app, &status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForAllHelp& help) {
    return app.exit(help);
  } catch (const CLI::CallForVersion& version) {
    return app.exit(version);
  } catch (const CLI::ParseError& error) {
    app.exit(error);  // prints the message and the usage hint
    return 2;
  } catch (const zeroplan::InputError& error) {
    std::cerr << "zeroplan: error: " << error.what() << '\n';
    return 2;
  } catch (const std::bad_alloc&) {
    std::cerr << "zeroplan: error: out of host memory\n";
    return 2;
  } catch (const std::exception& error) {
    std::cerr << "zeroplan: error: " << error.what() << '\n';
    return 2;
  }
  return status;
}
