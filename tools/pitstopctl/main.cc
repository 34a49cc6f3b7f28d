// pitstopctl: the operator CLI of pitstop-controller. See docs/controller.md.
#include <CLI/CLI.hpp>
#include <cmath>
#include <cstdlib>
#include <iostream>
#include <memory>
#include <string>

#include "absl/strings/str_cat.h"
#include "pitstop/address.h"
#include "pitstop/cli_errors.h"
#include "pitstop/leader_hint.h"
#include "tools/pitstopctl/commands.h"
#include "tools/pitstopctl/exit_codes.h"

int main(int argc, char** argv) {
  using namespace pitstop::ctl;
  GlobalOptions g;
  if (const char* env = std::getenv("PITSTOP_CONTROLLER"); env && *env) {
    g.controller = env;
  }
  CLI::App app(
      "pitstopctl: inspect and operate pitstop-controller.\n"
      "Exit codes: 0 ok, 1 faults present (faults --fail-if-any), 2 usage, "
      "3 controller unreachable, 4 not found, 5 request rejected (also "
      "PERMISSION_DENIED), 6 other error.",
      "pitstopctl");
  app.require_subcommand(1);
  app.add_option(
         "--controller", g.controller,
         "controller address host:port, or several comma-separated (the "
         "leader is followed; env PITSTOP_CONTROLLER)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            for (const std::string& a : pitstop::SplitControllerList(text)) {
              absl::Status s = pitstop::ValidateAddress(a, "--controller",
                                                        {.allow_unix = true})
                                   .status();
              if (!s.ok()) return std::string(s.message());
            }
            return std::string();
          },
          "HOST:PORT[,...]"))
      ->capture_default_str();
  app.add_option("--ca", g.ca,
                 "PEM CA file: talk TLS and verify the controller with it "
                 "(env PITSTOP_CA)")
      ->envname("PITSTOP_CA")
      ->check(CLI::ExistingFile);
  app.add_option("--cert", g.cert,
                 "PEM client certificate (its SAN URI pitstop://role/ROLE "
                 "gives the role; env PITSTOP_CERT)")
      ->envname("PITSTOP_CERT")
      ->check(CLI::ExistingFile);
  app.add_option("--key", g.key, "PEM private key of --cert (env PITSTOP_KEY)")
      ->envname("PITSTOP_KEY")
      ->check(CLI::ExistingFile);
  app.add_option("--token", g.token,
                 "bearer token from the controller's tokens file (env "
                 "PITSTOP_TOKEN; prefer the environment: flags show in ps)")
      ->envname("PITSTOP_TOKEN");
  app.add_option("-o,--output", g.output, "output format: table or json")
      ->check(CLI::IsMember({"table", "json"}))
      ->capture_default_str();
  app.add_option("--timeout-s", g.timeout_s,
                 "deadline of each call (s, > 0 and at most 1e6)")
      ->check(CLI::Validator(
          [](std::string& text) -> std::string {
            double v = 0;
            if (!CLI::detail::lexical_cast(text, v) || !std::isfinite(v) ||
                v <= 0 || v > 1e6) {
              return "--timeout-s: expected a number of seconds in (0, 1e6], "
                     "got '" +
                     text + "'";
            }
            return std::string();
          },
          "SECONDS"))
      ->capture_default_str();
  int exit_code = kExitOk;
  AddCommands(&app, &g, &exit_code);
  try {
    app.parse(argc, argv);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::ParseError& e) {
    if (const std::string unknown = pitstop::UnknownSubcommandError(app);
        !unknown.empty()) {
      std::cerr << unknown << std::endl;
      return kExitUsage;
    }
    app.exit(e);
    return kExitUsage;
  }
  return exit_code;
}
