// zeroplan_run: `zeroplan run` as its own program (the same code, cli/run_command.cpp), so the device script can
// run the executor even where the full zeroplan CLI is not built. Usage: zeroplan_run run --model M ...
#include <iostream>

#include <CLI/CLI.hpp>

#include "cli/run_command.h"
#include "core/input_error.h"

int main(int argc, char** argv) {
  CLI::App app{"zeroplan run (standalone)"};
  app.require_subcommand(1);
  int status = 0;
  zeroplan::add_run_command(app, &status);
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    return app.exit(e) == 0 ? 0 : 2;
  } catch (const std::exception& e) {
    std::cerr << "zeroplan: error: " << e.what() << '\n';
    return 2;
  }
  return status;
}
