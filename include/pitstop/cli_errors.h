// Clearer messages for command-line mistakes CLI11 words poorly.
//
// CLI11 reports a mistyped subcommand (`pitstopctl faultz`) as "A subcommand
// is required", which hides what was typed. The tools' main() calls
// UnknownSubcommandError() when parsing fails and prints its message instead
// when it has one. Any thread; no state.
#ifndef PITSTOP_CLI_ERRORS_H_
#define PITSTOP_CLI_ERRORS_H_

#include <string>

namespace CLI {
class App;
}

namespace pitstop {

// After `app` failed to parse: when the innermost command given expects a
// subcommand and got a word that names none, returns e.g.
// "pitstopctl fault: unknown command 'shwo'; commands: show, ack, resolve
// (--help explains each)". Otherwise returns "".
std::string UnknownSubcommandError(const CLI::App& app);

}  // namespace pitstop

#endif  // PITSTOP_CLI_ERRORS_H_
