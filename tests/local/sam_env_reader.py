"""Run by SAM CLI's own Python (.venv-sam), not by pytest: how `sam local invoke --env-vars FILE`
would set each function's environment, read with SAM CLI's own code.

Usage: python sam_env_reader.py TEMPLATE ENV_VARS_FILE  ->  JSON {LogicalId: {VAR: value}} on stdout.

SAM CLI's reader (``InvokeContext._get_env_vars_value``) loads the file; its function provider reads
the template (Globals merged); ``LocalLambdaRunner._make_env_vars`` applies the file the way an
invoke does, overriding only the variables a function declares.
"""

from __future__ import annotations

import json
import sys
import types

from samcli.commands.local.cli_common.invoke_context import InvokeContext
from samcli.commands.local.lib.local_lambda import LocalLambdaRunner
from samcli.lib.providers.sam_function_provider import SamFunctionProvider
from samcli.lib.providers.sam_stack_provider import SamLocalStackProvider


def main(template: str, env_vars_file: str) -> None:
    values = InvokeContext._get_env_vars_value(env_vars_file)
    stacks, _ = SamLocalStackProvider.get_stacks(template)
    provider = SamFunctionProvider(stacks)
    # What _make_env_vars reads from the runner: the file's values, credentials, debugging or not.
    runner = types.SimpleNamespace(env_vars_values=values, get_aws_creds=dict, is_debugging=lambda: False)
    resolved = {
        function.name: LocalLambdaRunner._make_env_vars(runner, function).resolve()
        for function in provider.get_all()
    }
    json.dump(resolved, sys.stdout)


if __name__ == "__main__":
    main(sys.argv[1], sys.argv[2])
