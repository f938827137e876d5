# Print an optspec for argparse to handle cmd's options that are independent of any subcommand.
function __fish_distlock_global_optspecs
    string join \n db= format= h/help V/version
end

function __fish_distlock_needs_command
    # Figure out if the current invocation already has a command.
    set -l cmd (commandline -opc)
    set -e cmd[1]
    argparse -s (__fish_distlock_global_optspecs) -- $cmd 2>/dev/null
    or return
    if set -q argv[1]
        # Also print the command, so this can be used to figure out what it is.
        echo $argv[1]
        return 1
    end
    return 0
end

function __fish_distlock_using_subcommand
    set -l cmd (__fish_distlock_needs_command)
    test -z "$cmd"
    and return 1
    contains -- $cmd[1] $argv
end

complete -c distlock -n "__fish_distlock_needs_command" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_needs_command" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_needs_command" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_needs_command" -s V -l version -d 'Print version'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "acquire" -d 'Take a lock (or extend your own); exit 75 if another owner holds it'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "status" -d 'Show who holds a lock; exit 1 if nobody does'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "release" -d 'Give up your lock; exit 1 if not held, 77 if another owner holds it'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "renew" -d 'Extend your lock\'s lease; exit 1 if not held, 77 if another owner holds it'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "run" -d 'Run a command while holding a lock, renewing it until the command exits'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "list" -d 'List the live locks, sorted by resource'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "log" -d 'Show lock history, oldest first'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "gc" -d 'Delete expired locks and old history'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "break" -d 'Force-release a lock (operators): remove its live tenures, recording who and why'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "serve" -d 'Serve the HTTP lock API over the store, for CI runners and programs'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "token" -d 'Make tokens for distlock serve --tokens'
complete -c distlock -n "__fish_distlock_needs_command" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l owner -d 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l ttl -d 'Lease length: whole seconds, e.g. 30, 90s, 5m, 1h30m (at most 365 days)' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l wait -d 'Keep trying for this long while another owner holds the lock [default: 0, try once]' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l limit -d 'Hold one of N slots: at most N holders at once, each asking with the same N (2-10000; 1 is the plain exclusive lock)' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l note -d 'Why or for whom the lock is held (shown by status, list and log)' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -l shared -d 'Hold a shared lock: any number of shared holders at once, and no exclusive one (as flock -s)'
complete -c distlock -n "__fish_distlock_using_subcommand acquire" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand status" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand status" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand status" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand release" -l owner -d 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand release" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand release" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l owner -d 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l ttl -d 'New lease length from now: whole seconds, e.g. 30, 90s, 5m' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand renew" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand renew" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand run" -l resource -d 'The resource to lock while the command runs; repeat it for a lock set, taken all at once (at most 64)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l owner -d 'Owner name (never read from DISTLOCK_OWNER) [default: <hostname>:<pid>:<random>]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l ttl -d 'Lease length, renewed every ttl/3 while the command runs' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l wait -d 'Keep trying for this long while another owner holds the lock [default: 0, try once]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l limit -d 'Hold one of N slots: at most N holders at once, each asking with the same N (2-10000; 1 is the plain exclusive lock)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l note -d 'Why or for whom the lock is held (shown by status, list and log)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l conflict-exit-code -d 'Exit with this code (0-255) instead of 75 when the lock is busy; 0 skips quietly' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l hold-at-least -d 'Keep the lock until this long after the tenure started, however soon the command ends (once per period across hosts); e.g. 50m' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l max-runtime -d 'Stop the command (exit 124) if it still runs this long after it started; e.g. 2h' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l kill-after -d 'When run stops the command, wait this long between SIGTERM and SIGKILL (all of it after a lost lease or --max-runtime; while renewals fail, no longer than the lease could last)' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand run" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand run" -l shared -d 'Hold a shared lock: any number of shared holders at once, and no exclusive one (as flock -s)'
complete -c distlock -n "__fish_distlock_using_subcommand run" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand list" -l prefix -d 'Only locks whose resource starts with this' -r
complete -c distlock -n "__fish_distlock_using_subcommand list" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand list" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand list" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand log" -l since -d 'Only events from this long ago until now, e.g. 1h or 7d' -r
complete -c distlock -n "__fish_distlock_using_subcommand log" -l limit -d 'At most this many events (the newest), still printed oldest first' -r
complete -c distlock -n "__fish_distlock_using_subcommand log" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand log" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand log" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand gc" -l keep-history -d 'Keep history events younger than this' -r
complete -c distlock -n "__fish_distlock_using_subcommand gc" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand gc" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand gc" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand break" -l reason -d 'Why (recorded in the history, and told to the evicted run)' -r
complete -c distlock -n "__fish_distlock_using_subcommand break" -l owner -d 'Only this owner\'s tenure (never read from DISTLOCK_OWNER) [default: every tenure]' -r
complete -c distlock -n "__fish_distlock_using_subcommand break" -l by -d 'Who breaks it, as the history records it; through a server with tokens the history also records the operator\'s token (by_token) [default: <user>@<hostname>]' -r
complete -c distlock -n "__fish_distlock_using_subcommand break" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand break" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand break" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l listen -d 'The address or host name and port to listen on (loopback only without tokens); a name is listened on at every address it resolves to; port 0 picks a free one' -r
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l tokens -d 'Callers must show a token of this file (see distlock token add); SIGHUP rereads it' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l tls-cert -d 'Serve HTTPS with the certificate chain in this PEM file (with --tls-key)' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l tls-key -d 'The private key of --tls-cert\'s certificate, a PEM file' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l max-waiters -d 'The most requests waiting in a queue at once; past it a waiting request is answered 429 with Retry-After' -r
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l max-waiters-per-token -d 'The most requests of one token waiting at once (callers without a token count as one)' -r
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l store-connections -d 'The most connections to the store for reads (status, list, log), beside the one that writes and the one that listens, whatever the number of waiters' -r
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand serve" -l insecure-http -d 'Serve plain HTTP beyond loopback, for a proxy in front that terminates TLS'
complete -c distlock -n "__fish_distlock_using_subcommand serve" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand token; and not __fish_seen_subcommand_from add help" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand token; and not __fish_seen_subcommand_from add help" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand token; and not __fish_seen_subcommand_from add help" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand token; and not __fish_seen_subcommand_from add help" -f -a "add" -d 'Add a token to a tokens file and print its secret, this once only'
complete -c distlock -n "__fish_distlock_using_subcommand token; and not __fish_seen_subcommand_from add help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -l tokens -d 'The tokens file to add it to' -r -F
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -l prefix -d 'A resource prefix the token may use (repeat for more); "deploy/" allows deploy/prod' -r
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -l db -d 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server\'s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]' -r
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -l format -d 'Output format of lock commands' -r -f -a "json\t'One JSON object per line'
text\t'One human-readable line per result'"
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -l all-resources -d 'The token may use every resource'
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -l operator -d 'The token is an operator\'s: it may break any lock, and sees every resource in list and log'
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from add" -s h -l help -d 'Print help (see more with \'--help\')'
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "add" -d 'Add a token to a tokens file and print its secret, this once only'
complete -c distlock -n "__fish_distlock_using_subcommand token; and __fish_seen_subcommand_from help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "acquire" -d 'Take a lock (or extend your own); exit 75 if another owner holds it'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "status" -d 'Show who holds a lock; exit 1 if nobody does'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "release" -d 'Give up your lock; exit 1 if not held, 77 if another owner holds it'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "renew" -d 'Extend your lock\'s lease; exit 1 if not held, 77 if another owner holds it'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "run" -d 'Run a command while holding a lock, renewing it until the command exits'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "list" -d 'List the live locks, sorted by resource'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "log" -d 'Show lock history, oldest first'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "gc" -d 'Delete expired locks and old history'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "break" -d 'Force-release a lock (operators): remove its live tenures, recording who and why'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "serve" -d 'Serve the HTTP lock API over the store, for CI runners and programs'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "token" -d 'Make tokens for distlock serve --tokens'
complete -c distlock -n "__fish_distlock_using_subcommand help; and not __fish_seen_subcommand_from acquire status release renew run list log gc break serve token help" -f -a "help" -d 'Print this message or the help of the given subcommand(s)'
complete -c distlock -n "__fish_distlock_using_subcommand help; and __fish_seen_subcommand_from token" -f -a "add" -d 'Add a token to a tokens file and print its secret, this once only'
