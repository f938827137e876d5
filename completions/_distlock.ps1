
using namespace System.Management.Automation
using namespace System.Management.Automation.Language

Register-ArgumentCompleter -Native -CommandName 'distlock' -ScriptBlock {
    param($wordToComplete, $commandAst, $cursorPosition)

    $commandElements = $commandAst.CommandElements
    $command = @(
        'distlock'
        for ($i = 1; $i -lt $commandElements.Count; $i++) {
            $element = $commandElements[$i]
            if ($element -isnot [StringConstantExpressionAst] -or
                $element.StringConstantType -ne [StringConstantType]::BareWord -or
                $element.Value.StartsWith('-') -or
                $element.Value -eq $wordToComplete) {
                break
        }
        $element.Value
    }) -join ';'

    $completions = @(switch ($command) {
        'distlock' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('-V', '-V ', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('--version', '--version', [CompletionResultType]::ParameterName, 'Print version')
            [CompletionResult]::new('acquire', 'acquire', [CompletionResultType]::ParameterValue, 'Take a lock (or extend your own); exit 75 if another owner holds it')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds a lock; exit 1 if nobody does')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Give up your lock; exit 1 if not held, 77 if another owner holds it')
            [CompletionResult]::new('renew', 'renew', [CompletionResultType]::ParameterValue, 'Extend your lock''s lease; exit 1 if not held, 77 if another owner holds it')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run a command while holding a lock, renewing it until the command exits')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the live locks, sorted by resource')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Show lock history, oldest first')
            [CompletionResult]::new('gc', 'gc', [CompletionResultType]::ParameterValue, 'Delete expired locks and old history')
            [CompletionResult]::new('break', 'break', [CompletionResultType]::ParameterValue, 'Force-release a lock (operators): remove its live tenures, recording who and why')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the HTTP lock API over the store, for CI runners and programs')
            [CompletionResult]::new('token', 'token', [CompletionResultType]::ParameterValue, 'Make tokens for distlock serve --tokens')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'distlock;acquire' {
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length: whole seconds, e.g. 30, 90s, 5m, 1h30m (at most 365 days)')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Keep trying for this long while another owner holds the lock [default: 0, try once]')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Hold one of N slots: at most N holders at once, each asking with the same N (2-10000; 1 is the plain exclusive lock)')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Why or for whom the lock is held (shown by status, list and log)')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold a shared lock: any number of shared holders at once, and no exclusive one (as flock -s)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;status' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;release' {
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;renew' {
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Who takes the lock: any name unique to this worker, e.g. worker-1 or $(hostname):$$')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'New lease length from now: whole seconds, e.g. 30, 90s, 5m')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;run' {
            [CompletionResult]::new('--resource', '--resource', [CompletionResultType]::ParameterName, 'The resource to lock while the command runs; repeat it for a lock set, taken all at once (at most 64)')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Owner name (never read from DISTLOCK_OWNER) [default: <hostname>:<pid>:<random>]')
            [CompletionResult]::new('--ttl', '--ttl', [CompletionResultType]::ParameterName, 'Lease length, renewed every ttl/3 while the command runs')
            [CompletionResult]::new('--wait', '--wait', [CompletionResultType]::ParameterName, 'Keep trying for this long while another owner holds the lock [default: 0, try once]')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'Hold one of N slots: at most N holders at once, each asking with the same N (2-10000; 1 is the plain exclusive lock)')
            [CompletionResult]::new('--note', '--note', [CompletionResultType]::ParameterName, 'Why or for whom the lock is held (shown by status, list and log)')
            [CompletionResult]::new('--conflict-exit-code', '--conflict-exit-code', [CompletionResultType]::ParameterName, 'Exit with this code (0-255) instead of 75 when the lock is busy; 0 skips quietly')
            [CompletionResult]::new('--hold-at-least', '--hold-at-least', [CompletionResultType]::ParameterName, 'Keep the lock until this long after the tenure started, however soon the command ends (once per period across hosts); e.g. 50m')
            [CompletionResult]::new('--max-runtime', '--max-runtime', [CompletionResultType]::ParameterName, 'Stop the command (exit 124) if it still runs this long after it started; e.g. 2h')
            [CompletionResult]::new('--kill-after', '--kill-after', [CompletionResultType]::ParameterName, 'When run stops the command, wait this long between SIGTERM and SIGKILL (all of it after a lost lease or --max-runtime; while renewals fail, no longer than the lease could last)')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('--shared', '--shared', [CompletionResultType]::ParameterName, 'Hold a shared lock: any number of shared holders at once, and no exclusive one (as flock -s)')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;list' {
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'Only locks whose resource starts with this')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;log' {
            [CompletionResult]::new('--since', '--since', [CompletionResultType]::ParameterName, 'Only events from this long ago until now, e.g. 1h or 7d')
            [CompletionResult]::new('--limit', '--limit', [CompletionResultType]::ParameterName, 'At most this many events (the newest), still printed oldest first')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;gc' {
            [CompletionResult]::new('--keep-history', '--keep-history', [CompletionResultType]::ParameterName, 'Keep history events younger than this')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;break' {
            [CompletionResult]::new('--reason', '--reason', [CompletionResultType]::ParameterName, 'Why (recorded in the history, and told to the evicted run)')
            [CompletionResult]::new('--owner', '--owner', [CompletionResultType]::ParameterName, 'Only this owner''s tenure (never read from DISTLOCK_OWNER) [default: every tenure]')
            [CompletionResult]::new('--by', '--by', [CompletionResultType]::ParameterName, 'Who breaks it, as the history records it; through a server with tokens the history also records the operator''s token (by_token) [default: <user>@<hostname>]')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;serve' {
            [CompletionResult]::new('--listen', '--listen', [CompletionResultType]::ParameterName, 'The address or host name and port to listen on (loopback only without tokens); a name is listened on at every address it resolves to; port 0 picks a free one')
            [CompletionResult]::new('--tokens', '--tokens', [CompletionResultType]::ParameterName, 'Callers must show a token of this file (see distlock token add); SIGHUP rereads it')
            [CompletionResult]::new('--tls-cert', '--tls-cert', [CompletionResultType]::ParameterName, 'Serve HTTPS with the certificate chain in this PEM file (with --tls-key)')
            [CompletionResult]::new('--tls-key', '--tls-key', [CompletionResultType]::ParameterName, 'The private key of --tls-cert''s certificate, a PEM file')
            [CompletionResult]::new('--max-waiters', '--max-waiters', [CompletionResultType]::ParameterName, 'The most requests waiting in a queue at once; past it a waiting request is answered 429 with Retry-After')
            [CompletionResult]::new('--max-waiters-per-token', '--max-waiters-per-token', [CompletionResultType]::ParameterName, 'The most requests of one token waiting at once (callers without a token count as one)')
            [CompletionResult]::new('--store-connections', '--store-connections', [CompletionResultType]::ParameterName, 'The most connections to the store for reads (status, list, log), beside the one that writes and the one that listens, whatever the number of waiters')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('--insecure-http', '--insecure-http', [CompletionResultType]::ParameterName, 'Serve plain HTTP beyond loopback, for a proxy in front that terminates TLS')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;token' {
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('add', 'add', [CompletionResultType]::ParameterValue, 'Add a token to a tokens file and print its secret, this once only')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'distlock;token;add' {
            [CompletionResult]::new('--tokens', '--tokens', [CompletionResultType]::ParameterName, 'The tokens file to add it to')
            [CompletionResult]::new('--prefix', '--prefix', [CompletionResultType]::ParameterName, 'A resource prefix the token may use (repeat for more); "deploy/" allows deploy/prod')
            [CompletionResult]::new('--db', '--db', [CompletionResultType]::ParameterName, 'Lock store: a SQLite file path, a postgres:// URL, or a distlock server''s http(s):// URL [env: DISTLOCK_DB] [default: $XDG_STATE_HOME/distlock/locks.db, else ~/.local/state/distlock/locks.db]')
            [CompletionResult]::new('--format', '--format', [CompletionResultType]::ParameterName, 'Output format of lock commands')
            [CompletionResult]::new('--all-resources', '--all-resources', [CompletionResultType]::ParameterName, 'The token may use every resource')
            [CompletionResult]::new('--operator', '--operator', [CompletionResultType]::ParameterName, 'The token is an operator''s: it may break any lock, and sees every resource in list and log')
            [CompletionResult]::new('-h', '-h', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            [CompletionResult]::new('--help', '--help', [CompletionResultType]::ParameterName, 'Print help (see more with ''--help'')')
            break
        }
        'distlock;token;help' {
            [CompletionResult]::new('add', 'add', [CompletionResultType]::ParameterValue, 'Add a token to a tokens file and print its secret, this once only')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'distlock;token;help;add' {
            break
        }
        'distlock;token;help;help' {
            break
        }
        'distlock;help' {
            [CompletionResult]::new('acquire', 'acquire', [CompletionResultType]::ParameterValue, 'Take a lock (or extend your own); exit 75 if another owner holds it')
            [CompletionResult]::new('status', 'status', [CompletionResultType]::ParameterValue, 'Show who holds a lock; exit 1 if nobody does')
            [CompletionResult]::new('release', 'release', [CompletionResultType]::ParameterValue, 'Give up your lock; exit 1 if not held, 77 if another owner holds it')
            [CompletionResult]::new('renew', 'renew', [CompletionResultType]::ParameterValue, 'Extend your lock''s lease; exit 1 if not held, 77 if another owner holds it')
            [CompletionResult]::new('run', 'run', [CompletionResultType]::ParameterValue, 'Run a command while holding a lock, renewing it until the command exits')
            [CompletionResult]::new('list', 'list', [CompletionResultType]::ParameterValue, 'List the live locks, sorted by resource')
            [CompletionResult]::new('log', 'log', [CompletionResultType]::ParameterValue, 'Show lock history, oldest first')
            [CompletionResult]::new('gc', 'gc', [CompletionResultType]::ParameterValue, 'Delete expired locks and old history')
            [CompletionResult]::new('break', 'break', [CompletionResultType]::ParameterValue, 'Force-release a lock (operators): remove its live tenures, recording who and why')
            [CompletionResult]::new('serve', 'serve', [CompletionResultType]::ParameterValue, 'Serve the HTTP lock API over the store, for CI runners and programs')
            [CompletionResult]::new('token', 'token', [CompletionResultType]::ParameterValue, 'Make tokens for distlock serve --tokens')
            [CompletionResult]::new('help', 'help', [CompletionResultType]::ParameterValue, 'Print this message or the help of the given subcommand(s)')
            break
        }
        'distlock;help;acquire' {
            break
        }
        'distlock;help;status' {
            break
        }
        'distlock;help;release' {
            break
        }
        'distlock;help;renew' {
            break
        }
        'distlock;help;run' {
            break
        }
        'distlock;help;list' {
            break
        }
        'distlock;help;log' {
            break
        }
        'distlock;help;gc' {
            break
        }
        'distlock;help;break' {
            break
        }
        'distlock;help;serve' {
            break
        }
        'distlock;help;token' {
            [CompletionResult]::new('add', 'add', [CompletionResultType]::ParameterValue, 'Add a token to a tokens file and print its secret, this once only')
            break
        }
        'distlock;help;token;add' {
            break
        }
        'distlock;help;help' {
            break
        }
    })

    $completions.Where{ $_.CompletionText -like "$wordToComplete*" } |
        Sort-Object -Property ListItemText
}
