# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_bcd_global_optspecs
    string join \n host= host-root= nvidia-smi= data-dir= cdi-dir= helper-socket= api-socket= mig-config= json color= log-format= xid-ignore= xid-unhealthy= h/help V/version
end

function __fish_bcd_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_bcd_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_bcd_using_subcommand
    set -l cmd (__fish_bcd_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c bcd -n "__fish_bcd_needs_command" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_needs_command" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_needs_command" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_needs_command" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_needs_command" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_needs_command" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_needs_command" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "helper" -d 'Talk to the root helper directly'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "hardware" -d 'Collect the inventory once (without the passthrough memory) and print it'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "doctor" -d 'Check this host before trusting it with GPU work: one line per check (ok, warn or fail, its name, its message); exit status 1 when any check fails'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "cdi" -d 'CDI specs of holds'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "gpu" -d 'GPU operations, through the node service'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "hold" -d 'Holds and their CDI specs, through the node service'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "vfio" -d 'GPUs to vfio-pci and back, through the node service'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "vm" -d 'libvirt domains with GPUs, through the node service'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "remediations" -d 'The recovery loop\'s remediations (bcd node --remediate), through the node service: a table of each GPU\'s reason, steps and result'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "mig" -d 'MIG layouts from a mig-parted-format file (--mig-config)'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "node" -d 'The long-running node service'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "status" -d 'A table of the GPUs from a live sample (waits at most 10 s), each with its state (HEALTHY, DEGRADED, UNHEALTHY or UNKNOWN) and the reasons below it'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "generate-docs" -d 'Write bcd\'s man pages (`DIR/man/*.1`) and shell completions (`DIR/completions/`: bash, zsh, fish) from this command line; the packaged ones are made so'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "diag" -d 'diag.nvml: collect again and check the GPUs; exit 1 unless every check passed'
complete -c bcd -n "__fish_bcd_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -f -a "ping" -d 'Ask bcd-helper for its version and the operations it offers'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and not __fish_seen_subcommand_from ping help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from ping" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from help" -f -a "ping" -d 'Ask bcd-helper for its version and the operations it offers'
complete -c bcd -n "__fish_bcd_using_subcommand helper; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -s i -l id -d 'Show only these GPUs: an index, a UUID or a bus id; repeatable or comma-separated' -r
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l gpu-slots -d 'The slots per GPU the labels count (bcd node --gpu-slots)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l labels -d 'Print the node labels instead (GPU Feature Discovery\'s names and bcd.dev/ health, as bcd node --nfd-features-dir keeps them), writing nothing'
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand hardware" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand doctor" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -f -a "render" -d 'Print the CDI spec a hold of these devices would get, writing nothing'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and not __fish_seen_subcommand_from render help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l kubernetes -d 'A Kubernetes binding: the spec carries no NVIDIA edits'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from render" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from help" -f -a "render" -d 'Print the CDI spec a hold of these devices would get, writing nothing'
complete -c bcd -n "__fish_bcd_using_subcommand cdi; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -f -a "reset" -d 'gpu.reset through the node service: refused as a whole when a GPU is held or passed through; each reset GPU is checked again afterwards'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and not __fish_seen_subcommand_from reset help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from reset" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from help" -f -a "reset" -d 'gpu.reset through the node service: refused as a whole when a GPU is held or passed through; each reset GPU is checked again afterwards'
complete -c bcd -n "__fish_bcd_using_subcommand gpu; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -f -a "apply" -d 'Hold devices and write their CDI spec (bcd.dev/gpu=<uuid>)'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -f -a "release" -d 'Release a hold and remove its CDI spec'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -f -a "list" -d 'List the holds'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and not __fish_seen_subcommand_from apply release list help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from apply" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l force -d 'Release a Kubernetes hold although a pod still has its devices (the pod keeps running on devices bcd may then hand to someone else)'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from release" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from list" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from help" -f -a "apply" -d 'Hold devices and write their CDI spec (bcd.dev/gpu=<uuid>)'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from help" -f -a "release" -d 'Release a hold and remove its CDI spec'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from help" -f -a "list" -d 'List the holds'
complete -c bcd -n "__fish_bcd_using_subcommand hold; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -f -a "bind" -d 'Move a GPU (and the other NVIDIA functions of its IOMMU group) to vfio-pci'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -f -a "release" -d 'Give a GPU on vfio-pci back to the kernel\'s driver'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and not __fish_seen_subcommand_from bind release help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from bind" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from release" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from help" -f -a "bind" -d 'Move a GPU (and the other NVIDIA functions of its IOMMU group) to vfio-pci'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from help" -f -a "release" -d 'Give a GPU on vfio-pci back to the kernel\'s driver'
complete -c bcd -n "__fish_bcd_using_subcommand vfio; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -f -a "start" -d 'Persistence off for the domain\'s GPUs, then virsh start'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -f -a "restore" -d 'Persistence off for the image\'s GPUs, then virsh restore'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -f -a "destroy" -d 'virsh destroy, then persistence on for the GPUs back on nvidia'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and not __fish_seen_subcommand_from start restore destroy help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from start" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from restore" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from destroy" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from help" -f -a "start" -d 'Persistence off for the domain\'s GPUs, then virsh start'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from help" -f -a "restore" -d 'Persistence off for the image\'s GPUs, then virsh restore'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from help" -f -a "destroy" -d 'virsh destroy, then persistence on for the GPUs back on nvidia'
complete -c bcd -n "__fish_bcd_using_subcommand vm; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand remediations" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -f -a "plan" -d 'Read the host (no node needed) and print, per GPU the layout names, what is there, what the layout wants and the steps; exit 0 when the host matches, 1 when steps are needed, 3 when the host cannot be read or the layout is refused'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -f -a "apply" -d 'Apply a layout through the node service and its helper: refused as a whole when a GPU to change is held, claimed by a pod, passed through, stepping or running processes; exit 0 when applied, 3 when refused or failed'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -f -a "status" -d 'The layout the node applied last, its state and each GPU\'s steps'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and not __fish_seen_subcommand_from plan apply status help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from plan" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from apply" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from status" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from help" -f -a "plan" -d 'Read the host (no node needed) and print, per GPU the layout names, what is there, what the layout wants and the steps; exit 0 when the host matches, 1 when steps are needed, 3 when the host cannot be read or the layout is refused'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from help" -f -a "apply" -d 'Apply a layout through the node service and its helper: refused as a whole when a GPU to change is held, claimed by a pod, passed through, stepping or running processes; exit 0 when applied, 3 when refused or failed'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from help" -f -a "status" -d 'The layout the node applied last, its state and each GPU\'s steps'
complete -c bcd -n "__fish_bcd_using_subcommand mig; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand node" -l metrics-listen -d 'Serve Prometheus metrics on this address (GET /metrics); off by default' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l otlp-endpoint -d 'Send the GPU samples over OTLP/HTTP (protobuf) to this collector every sample interval, e.g. http://127.0.0.1:4318 (POST /v1/metrics); plain HTTP only' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l sample-interval -d 'Seconds between GPU samples (at least 5)' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l api-group -d 'The group given the API socket (mode 0660)' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l gpu-slots -d 'Time-sliced slots each GPU offers to holds, as GPU-<uuid>::0 to ::N-1 (0: none; at most 64). Slots of one GPU may go to different holds; a slot never goes with its whole GPU or its MIG devices' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l metrics-compat -d 'Also serve the metrics under another exporter\'s names: `dcgm` (NVIDIA dcgm-exporter\'s DCGM_FI_* names, units and labels, host as `hostname`) or `dcgm-legacy` (the same with `Hostname`, as dcgm-exporter named it before 2026)' -r -f -a "dcgm\t'dcgm-exporter\'s names and labels, the host\'s name as `hostname` (dcgm-exporter since it renamed the label in 2026)'
dcgm-legacy\t'The same, the host\'s name as `Hostname` (dcgm-exporter before the rename, which dashboard 12239 and most alert rules written until then expect)'"
complete -c bcd -n "__fish_bcd_using_subcommand node" -l remediate-after -d 'Seconds a GPU\'s reset-worthy verdict must stand before the loop acts (a burst of XIDs is one remediation)' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l remediate-max-resets -d 'Resets per GPU per boot, never replenished; then the GPU is reboot-required' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l remediate-backoff -d 'Seconds before a failed reset is tried again; doubles with each failure' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l reboot-required-file -d 'With --remediate: write this file while a GPU needs a reboot (one line per GPU), for a reboot orchestrator such as kured (--reboot-sentinel); removed once none does, if bcd made it. The package\'s choice: /run/bcd/reboot-required' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l mig-layout -d 'Apply this MIG layout of the layout file (--mig-config) at start, before the device plugins and the DRA driver offer anything; refused like bcd mig apply (the node then serves with the GPUs as found). Never applied again on its own' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l nvidia-cdi-spec -d 'Keep NVIDIA\'s CDI spec current: bcd-helper regenerates it (nvidia-ctk cdi generate into its own --nvidia-cdi-spec, which must be this file) when the driver or the GPUs and MIG devices change; off when not given. E.g. /var/run/cdi/nvidia.yaml' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l device-plugin-dir -d 'Serve kubelet device plugins (bcd.dev/gpu, bcd.dev/mig-<profile>, bcd.dev/gpu-slot) in this folder, the kubelet\'s /var/lib/kubelet/device-plugins; off when not given' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l pod-resources-socket -d 'The kubelet\'s PodResources socket, read to learn which Kubernetes holds no pod has any more' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l kubernetes-release-grace -d 'Seconds a Kubernetes hold whose devices no pod has is kept before its release' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l runtime-dir -d 'A folder on tmpfs that lasts the boot (bcd.service\'s RuntimeDirectory, kept across restarts): XID conditions the data folder cannot take are kept here meanwhile. Default: the API socket\'s folder (/run/bcd)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l nfd-features-dir -d 'Keep the GPUs\' node labels (GPU Feature Discovery\'s names, and bcd.dev/ health) in the file `bcd` of this Node Feature Discovery features folder, usually /etc/kubernetes/node-feature-discovery/features.d; off when not given' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l kubelet-dir -d 'The kubelet\'s root folder, holding plugins_registry/ and plugins/ (with --dra)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l cdi-runtime-dir -d 'Where prepared DRA claims\' CDI specs go; a folder that does not outlive a reboot (with --dra)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l kubeconfig -d 'The API server\'s kubeconfig (its current context); without it, the pod\'s in-cluster service account (with --dra)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l node-name -d 'The node\'s name in Kubernetes, the pool\'s name (with --dra); default: the host\'s name in lower case, as the kubelet\'s' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand node" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand node" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand node" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand node" -l remediate -d 'Reset, through the helper, each unhealthy GPU a reset fixes once nothing uses it (one at a time, within a budget per GPU per boot); say reboot-required where only a reboot will do. Off by default: without it nothing is ever reset by bcd on its own'
complete -c bcd -n "__fish_bcd_using_subcommand node" -l dra -d 'Be the kubelet plugin of the DRA driver gpu.bcd.dev and publish the node\'s ResourceSlices (resource.k8s.io/v1); off when not given'
complete -c bcd -n "__fish_bcd_using_subcommand node" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand node" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand node" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand status" -l format -d 'The output\'s shape: `table` (for a person), `csv` (one GPU a row, numbers without units) or `json` (as --json)' -r -f -a "table\t'A header row and aligned columns, the reasons below each GPU, the notes below'
csv\t'A header row, one GPU a row, numbers without units'
json\t'The JSON document, as --json'"
complete -c bcd -n "__fish_bcd_using_subcommand status" -s i -l id -d 'Show only these GPUs: an index, a UUID or a bus id; repeatable or comma-separated' -r
complete -c bcd -n "__fish_bcd_using_subcommand status" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand status" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand status" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand status" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand status" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand status" -s w -l watch -d 'Keep the table on screen, redrawn at every change a running node reports and once per its sample interval, until Ctrl-C (without a node, read again every 5 s)'
complete -c bcd -n "__fish_bcd_using_subcommand status" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand status" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand generate-docs" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l gpu -d 'Check only this GPU (UUID); repeatable' -r
complete -c bcd -n "__fish_bcd_using_subcommand diag" -s i -l id -d 'Check only these GPUs: an index, a UUID or a bus id; repeatable or comma-separated' -r
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l expected-gpus -d 'Fail gpu.count when fewer GPUs are visible' -r
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l host -d 'A fake host: DIR/root is the root for /proc, /sys and /dev, and DIR/bin/nvidia-smi the nvidia-smi to run (for demos and tests)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l host-root -d 'The root under which /proc, /sys and /dev are read' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l nvidia-smi -d 'The nvidia-smi to run (a bare name is looked up on PATH)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l data-dir -d 'Where the agent keeps its state files' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l cdi-dir -d 'Where hold CDI specs are written (vendor specs are read from here, then /var/run/cdi)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l helper-socket -d 'The root helper\'s socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l api-socket -d 'The node service\'s API socket' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l mig-config -d 'The MIG layout file (mig-parted\'s format), read by bcd mig plan and by bcd node at each apply (default /etc/bcd/mig-config.yaml)' -r -F
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l color -d 'Colour the state words: `auto` on a terminal unless NO_COLOR is set, `always`, or `never`' -r -f -a "auto\t'Colour when stdout is a terminal and `NO_COLOR` is unset or empty'
always\t'Colour always, even through a pipe or with `NO_COLOR`'
never\t'No colour'"
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l log-format -d 'How log lines are written to stderr: `text`, or `json` (one object per line, for the journal\'s and log shippers\' sake). Which lines: BCD_LOG (e.g. `debug`, `warn,bcd::kubelet=debug`); `info` for bcd node, `warn` for the other commands' -r -f -a "text\t'One line of text per event'
json\t'One JSON object per event (`timestamp`, `level`, `target`, `fields.message`)'"
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l xid-ignore -d 'XIDs that never affect a GPU\'s health, overriding NVIDIA\'s catalog (e.g. 13,31)' -r
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l xid-unhealthy -d 'XIDs that make a GPU unhealthy until a reset, overriding NVIDIA\'s catalog (e.g. 43)' -r
complete -c bcd -n "__fish_bcd_using_subcommand diag" -l json -d 'Machine-readable output where the command has it'
complete -c bcd -n "__fish_bcd_using_subcommand diag" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c bcd -n "__fish_bcd_using_subcommand diag" -s V -l version -d 'Print version'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "helper" -d 'Talk to the root helper directly'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "hardware" -d 'Collect the inventory once (without the passthrough memory) and print it'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "doctor" -d 'Check this host before trusting it with GPU work: one line per check (ok, warn or fail, its name, its message); exit status 1 when any check fails'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "cdi" -d 'CDI specs of holds'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "gpu" -d 'GPU operations, through the node service'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "hold" -d 'Holds and their CDI specs, through the node service'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "vfio" -d 'GPUs to vfio-pci and back, through the node service'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "vm" -d 'libvirt domains with GPUs, through the node service'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "remediations" -d 'The recovery loop\'s remediations (bcd node --remediate), through the node service: a table of each GPU\'s reason, steps and result'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "mig" -d 'MIG layouts from a mig-parted-format file (--mig-config)'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "node" -d 'The long-running node service'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "status" -d 'A table of the GPUs from a live sample (waits at most 10 s), each with its state (HEALTHY, DEGRADED, UNHEALTHY or UNKNOWN) and the reasons below it'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "generate-docs" -d 'Write bcd\'s man pages (`DIR/man/*.1`) and shell completions (`DIR/completions/`: bash, zsh, fish) from this command line; the packaged ones are made so'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "diag" -d 'diag.nvml: collect again and check the GPUs; exit 1 unless every check passed'
complete -c bcd -n "__fish_bcd_using_subcommand help; and not __fish_seen_subcommand_from helper hardware doctor cdi gpu hold vfio vm remediations mig node status generate-docs diag help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from helper" -f -a "ping" -d 'Ask bcd-helper for its version and the operations it offers'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from cdi" -f -a "render" -d 'Print the CDI spec a hold of these devices would get, writing nothing'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from gpu" -f -a "reset" -d 'gpu.reset through the node service: refused as a whole when a GPU is held or passed through; each reset GPU is checked again afterwards'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from hold" -f -a "apply" -d 'Hold devices and write their CDI spec (bcd.dev/gpu=<uuid>)'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from hold" -f -a "release" -d 'Release a hold and remove its CDI spec'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from hold" -f -a "list" -d 'List the holds'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from vfio" -f -a "bind" -d 'Move a GPU (and the other NVIDIA functions of its IOMMU group) to vfio-pci'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from vfio" -f -a "release" -d 'Give a GPU on vfio-pci back to the kernel\'s driver'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from vm" -f -a "start" -d 'Persistence off for the domain\'s GPUs, then virsh start'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from vm" -f -a "restore" -d 'Persistence off for the image\'s GPUs, then virsh restore'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from vm" -f -a "destroy" -d 'virsh destroy, then persistence on for the GPUs back on nvidia'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from mig" -f -a "plan" -d 'Read the host (no node needed) and print, per GPU the layout names, what is there, what the layout wants and the steps; exit 0 when the host matches, 1 when steps are needed, 3 when the host cannot be read or the layout is refused'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from mig" -f -a "apply" -d 'Apply a layout through the node service and its helper: refused as a whole when a GPU to change is held, claimed by a pod, passed through, stepping or running processes; exit 0 when applied, 3 when refused or failed'
complete -c bcd -n "__fish_bcd_using_subcommand help; and __fish_seen_subcommand_from mig" -f -a "status" -d 'The layout the node applied last, its state and each GPU\'s steps'
