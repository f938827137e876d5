
use builtin;
use str;

set edit:completion:arg-completer[distlock] = {|@words|
    fn spaces {|n|
        builtin:repeat $n ' ' | str:join ''
    }
    fn cand {|text desc|
        edit:complex-candidate $text &display=$text' '(spaces (- 14 (wcswidth $text)))$desc
    }
    var command = 'distlock'
    for word $words[1..-1] {
        if (str:has-prefix $word '-') {
            break
        }
        set command = $command';'$word
    }
    var completions = [
        &'distlock'= {
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand -V 'Print version'
            cand --version 'Print version'
            cand acquire 'Take a lock (or extend your own); exit 75 if another owner holds it'
            cand status 'Show who holds a lock; exit 1 if nobody does'
            cand release 'Give up your lock; exit 1 if not held, 77 if another owner holds it'
            cand renew 'Extend your lock''s lease; exit 1 if not held, 77 if another owner holds it'
            cand run 'Run a command while holding a lock, renewing it until the command exits'
            cand list 'List the live locks, sorted by resource'
            cand log 'Show lock history, oldest first'
            cand gc 'Delete expired locks and old history'
            cand break 'Force-release a lock (operators): remove its live tenures, recording who and why'
            cand serve 'Serve the HTTP lock API over the store, for CI runners and programs'
            cand token 'Make tokens for distlock serve --tokens'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'distlock;acquire'= {
            cand --owner 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$'
            cand --ttl 'Lease length: whole seconds, e.g. 30, 90s, 5m, 1h30m (at most 365 days)'
            cand --wait 'Keep trying for this long while another owner holds the lock [default: 0, try once]'
            cand --limit 'Hold one of N slots: at most N holders at once, each asking with the same N (2-10000; 1 is the plain exclusive lock)'
            cand --note 'Why or for whom the lock is held (shown by status, list and log)'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand --shared 'Hold a shared lock: any number of shared holders at once, and no exclusive one (as flock -s)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;status'= {
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;release'= {
            cand --owner 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;renew'= {
            cand --owner 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$'
            cand --ttl 'New lease length from now: whole seconds, e.g. 30, 90s, 5m'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;run'= {
            cand --resource 'The resource to lock while the command runs; repeat it for a lock set, taken all at once (at most 64)'
            cand --owner 'Owner name (never read from DISTLOCK_OWNER) [default: <hostname>:<pid>:<random>]'
            cand --ttl 'Lease length, renewed every ttl/3 while the command runs'
            cand --wait 'Keep trying for this long while another owner holds the lock [default: 0, try once]'
            cand --limit 'Hold one of N slots: at most N holders at once, each asking with the same N (2-10000; 1 is the plain exclusive lock)'
            cand --note 'Why or for whom the lock is held (shown by status, list and log)'
            cand --conflict-exit-code 'Exit with this code (0-255) instead of 75 when the lock is busy; 0 skips quietly'
            cand --hold-at-least 'Keep the lock until this long after the tenure started, however soon the command ends (once per period across hosts); e.g. 50m'
            cand --max-runtime 'Stop the command (exit 124) if it still runs this long after it started; e.g. 2h'
            cand --kill-after 'When run stops the command, wait this long between SIGTERM and SIGKILL (all of it after a lost lease or --max-runtime; while renewals fail, no longer than the lease could last)'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand --shared 'Hold a shared lock: any number of shared holders at once, and no exclusive one (as flock -s)'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;list'= {
            cand --prefix 'Only locks whose resource starts with this'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;log'= {
            cand --since 'Only events from this long ago until now, e.g. 1h or 7d'
            cand --limit 'At most this many events (the newest), still printed oldest first'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;gc'= {
            cand --keep-history 'Keep history events younger than this'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;break'= {
            cand --reason 'Why (recorded in the history, and told to the evicted run)'
            cand --owner 'Only this owner''s tenure (never read from DISTLOCK_OWNER) [default: every tenure]'
            cand --by 'Who breaks it, as the history records it; through a server with tokens the history also records the operator''s token (by_token) [default: <user>@<hostname>]'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;serve'= {
            cand --listen 'The address or host name and port to listen on (loopback only without tokens); a name is listened on at every address it resolves to; port 0 picks a free one'
            cand --tokens 'Callers must show a token of this file (see distlock token add); SIGHUP rereads it'
            cand --tls-cert 'Serve HTTPS with the certificate chain in this PEM file (with --tls-key)'
            cand --tls-key 'The private key of --tls-cert''s certificate, a PEM file'
            cand --max-waiters 'The most requests waiting in a queue at once; past it a waiting request is answered 429 with Retry-After'
            cand --max-waiters-per-token 'The most requests of one token waiting at once (callers without a token count as one)'
            cand --store-connections 'The most connections to the store for reads (status, list, log), beside the one that writes and the one that listens, whatever the number of waiters'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand --insecure-http 'Serve plain HTTP beyond loopback, for a proxy in front that terminates TLS'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;token'= {
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
            cand add 'Add a token to a tokens file and print its secret, this once only'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'distlock;token;add'= {
            cand --tokens 'The tokens file to add it to'
            cand --prefix 'A resource prefix the token may use (repeat for more); "deploy/" allows deploy/prod'
            cand --db 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]'
            cand --format 'Output format of lock commands'
            cand --all-resources 'The token may use every resource'
            cand --operator 'The token is an operator''s: it may break any lock, and sees every resource in list and log'
            cand -h 'Print help (see more with ''--help'')'
            cand --help 'Print help (see more with ''--help'')'
        }
        &'distlock;token;help'= {
            cand add 'Add a token to a tokens file and print its secret, this once only'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'distlock;token;help;add'= {
        }
        &'distlock;token;help;help'= {
        }
        &'distlock;help'= {
            cand acquire 'Take a lock (or extend your own); exit 75 if another owner holds it'
            cand status 'Show who holds a lock; exit 1 if nobody does'
            cand release 'Give up your lock; exit 1 if not held, 77 if another owner holds it'
            cand renew 'Extend your lock''s lease; exit 1 if not held, 77 if another owner holds it'
            cand run 'Run a command while holding a lock, renewing it until the command exits'
            cand list 'List the live locks, sorted by resource'
            cand log 'Show lock history, oldest first'
            cand gc 'Delete expired locks and old history'
            cand break 'Force-release a lock (operators): remove its live tenures, recording who and why'
            cand serve 'Serve the HTTP lock API over the store, for CI runners and programs'
            cand token 'Make tokens for distlock serve --tokens'
            cand help 'Print this message or the help of the given subcommand(s)'
        }
        &'distlock;help;acquire'= {
        }
        &'distlock;help;status'= {
        }
        &'distlock;help;release'= {
        }
        &'distlock;help;renew'= {
        }
        &'distlock;help;run'= {
        }
        &'distlock;help;list'= {
        }
        &'distlock;help;log'= {
        }
        &'distlock;help;gc'= {
        }
        &'distlock;help;break'= {
        }
        &'distlock;help;serve'= {
        }
        &'distlock;help;token'= {
            cand add 'Add a token to a tokens file and print its secret, this once only'
        }
        &'distlock;help;token;add'= {
        }
        &'distlock;help;help'= {
        }
    ]
    $completions[$command]
}
