-- A versions write (`write_mode: versions`) under `bad_rows: quarantine`
-- holds a version stored already with other content in the duplicates log,
-- under the policy `conflict`, the stored version's hash as `kept_row_hash`.
alter table idem.duplicates
    drop constraint duplicates_policy_check,
    add constraint duplicates_policy_check
        check (policy in ('keep_one', 'hold', 'reject', 'conflict'));
