/* entry.c - main() of the deftsim program; everything else is deftsim_cli_main (main.c), which
 * the command-line fuzz target (tests/fuzz/fuzz_cli.c) calls without this file. */
#include "cli.h"

int main(int argc, char **argv)
{
    return deftsim_cli_main(argc, argv);
}
